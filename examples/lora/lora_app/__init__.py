"""FFA-LoRA example app."""
