"""LoRA family wire names: instruction phases, Fed-SB's frame and init-gradient records."""

from __future__ import annotations

#: Config value of ``phase`` in an instruction: local training, or the Fed-SB init gradient.
PHASE_TRAIN = "train"
PHASE_INIT = "fed-sb.init"
PHASE_EVALUATE = "evaluate"
#: Record with Fed-SB's frozen B and A (downlink, once per client).
FRAME_RECORD = "frame"
#: Record with the summed init gradients (uplink, round 0 of Fed-SB).
GRADS_RECORD = "grads"
#: Config key naming the frame a message expects the client to hold.
FRAME_ID_KEY = "fed-sb.frame-id"
