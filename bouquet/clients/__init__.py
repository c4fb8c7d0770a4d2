"""Node-side procedures of each method (torch, peft and opacus live here, never on servers)."""
