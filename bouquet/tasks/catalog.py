"""The built-in tasks, registered under the ``bouquet.tasks`` entry-point group.

Only :class:`~bouquet.apps.registry.TaskSpec` records live here: importing this module imports no
task code, so ``bouquet list`` and servers stay light.
"""

from bouquet.apps.registry import TaskSpec

TASKS = [
    TaskSpec(
        name="digits-mlp",
        description="scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), a 2-layer MLP",
        factory="bouquet.tasks.digits:DigitsMLP",
        extra="torch",
    ),
    TaskSpec(
        name="fmnist-cnn",
        description="Fashion-MNIST (Debian dataset-fashion-mnist, or the hub), a small CNN",
        factory="bouquet.tasks.fmnist:FashionCNN",
        extra="torch",
    ),
]
