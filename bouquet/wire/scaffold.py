"""SCAFFOLD-family wire names: the control-variate downlink and the second uplink vector."""

from __future__ import annotations

#: Downlink record holding the global control variate (one array, :data:`CONTROL_KEY`).
CONTROL_RECORD = "control"
CONTROL_KEY = "c"
#: SCAFFOLD's second uplink vector (the control update ``dc``).
CONTROL_PAYLOAD_RECORD = "payload-c"
