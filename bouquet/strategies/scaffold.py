"""SCAFFOLD, single-uplink SCAFFOLD, SCALLION and SCAFCOM (server side).

References
----------
* Karimireddy, Kale, Mohri, Reddi, Stich, Suresh. "SCAFFOLD: Stochastic Controlled Averaging for
  Federated Learning." ICML 2020.
* Huang, Li, Li. "Stochastic Controlled Averaging for Federated Learning with Communication
  Compression." ICLR 2024 (arXiv 2308.08165): SCALLION and SCAFCOM.

Server state: the global model ``x`` and the global control ``c`` (a flat float32 vector over
every model coordinate, zero at the start). Clients keep ``c_i`` (and SCAFCOM's momentum ``v_i``)
in their ``context.state``.

**SCAFFOLD** (two uplink vectors). A client runs ``K`` steps of
``y <- y - eta_l (g(y) - c_i + c)`` from ``x``, sets ``c_i+ = c_i - c + (x - y) / (K eta_l)``
(option II, the default) or ``c_i+ = g(x)``, its gradient at ``x`` over one more pass of its data
(option I, ``scaffold.controls = "I"``), and sends ``dy = y - x`` and ``dc = c_i+ - c_i``. The
server applies ``x <- x + eta_g mean(dy)`` and ``c <- c + (1/N) sum(dc)`` in both cases.

**Single uplink** (the ICLR'24 reformulation). Since ``dy_i = -K_i eta_l (c + dc_i)``, one vector
``delta_i = (x - y_i) / (K_i eta_l) - c`` suffices:
``x <- x - eta_g eta_l mean(K_i (c + delta_i))`` and ``c <- c + (alpha/N) sum(delta_i)``. With
``K_i = K`` for all clients the model step is ``gamma (c + mean delta)`` with
``gamma = eta_g eta_l K`` (reconstructed scaling; ``server-step='global-lr'`` uses
``eta_g (c + mean delta)`` instead, as a third-party Flower port does).

**SCALLION**: the client sends ``C(delta_i)`` with an unbiased compressor and sets
``c_i <- c_i + alpha C(delta_i)``; the server uses the decoded vectors in both updates.

**SCAFCOM**: the client keeps a momentum ``v_i <- (1 - beta) v_i + beta gbar_i`` of its mean
local gradient ``gbar_i = (x - y) / (K eta_l) - c + c_i`` and sends ``C(v_i - c_i)`` with a biased
(contractive) compressor; ``c_i <- c_i + alpha C(v_i - c_i)``. The server is SCALLION's. With
``momentum-placement='local-steps'`` the momentum enters every local step instead
(``y <- y - eta_l (beta g(y) + (1 - beta) v_i - c_i + c)``) and the new ``v_i`` is the mean of
those directions, ``(x - y) / (K eta_l) + c_i - c``; both give the same ``v_i`` formula in terms of
the local gradients, they differ in the local trajectory.

A client's first ``v_i`` is its first ``gbar_i`` (``momentum-init='first'``, the default), so
that the momentum is an average of local gradients from the first round on; ``'zero'`` starts
from ``v_i = 0`` and makes a client's first contribution ``beta`` times smaller.

The placement of the momentum, the initial ``v_i``, the default ``alpha`` and the step scaling
are reconstructions (the paper's text was not available); see docs/methods/scafcom.md.

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict

from bouquet.compression import PAYLOAD_RECORD, Compressor, make_compressor
from bouquet.strategies.arguments import StrategySetup
from bouquet.strategies.round_log import NodeReply
from bouquet.strategies.sections.scaffold import (
    ScafcomConfig,
    ScaffoldConfig,
    ScallionConfig,
    control_step,
)
from bouquet.strategies.uplink import VectorUplinkStrategy
from bouquet.wire.scaffold import CONTROL_KEY, CONTROL_PAYLOAD_RECORD, CONTROL_RECORD
from bouquet.wire.uplink import STEPS_METRIC


class _ControlStrategy(VectorUplinkStrategy):
    """Model and global control ``c``; sends both down."""

    def on_model(self) -> None:
        """The layout and a zero global control ``c``."""
        super().on_model()
        self.c = np.zeros(self.layout.size, dtype=np.float32)

    def downlink(self, rnd: int, partition_id: int) -> dict[str, Any]:
        """Send the global control variate."""
        return {CONTROL_RECORD: ArrayRecord({CONTROL_KEY: Array(self.c)})}

    def state_dict(self) -> dict[str, Any]:
        """Return the base state plus ``c``."""
        return {**super().state_dict(), "control": self.c.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.c = np.asarray(state["control"], dtype=np.float32).copy()


class Scaffold(_ControlStrategy):
    """SCAFFOLD with two dense uplink vectors ``dy`` and ``dc``.

    The clients update ``c_i`` by option II (default) or option I (``controls="I"``: the
    gradient at ``x`` over one pass of their data); the server's rule is the same for both.
    """

    prefix = "scaffold"
    method_name = "scaffold"
    config_sections = {"scaffold": ScaffoldConfig}
    payloads = (PAYLOAD_RECORD, CONTROL_PAYLOAD_RECORD)

    def make_compressor(self) -> Compressor:
        """Both vectors travel dense."""
        return make_compressor("identity")

    def apply(self, rnd: int, vectors: list[list[np.ndarray]], replies: list[NodeReply]
              ) -> dict[str, float]:
        """``x += eta_g mean(dy)``; ``c += (1/N) sum(dc)``."""
        dy = np.mean([vec[0] for vec in vectors], axis=0, dtype=np.float64)
        dc = np.sum([vec[1] for vec in vectors], axis=0, dtype=np.float64)
        self.move_model(self.cfg.server_lr * dy)
        self.c = (self.c + dc / self.num_clients()).astype(np.float32)
        return {"control_norm": float(np.linalg.norm(self.c))}


class SingleUplink(_ControlStrategy):
    """Single-uplink SCAFFOLD (scaffold-1up); the server SCALLION and SCAFCOM share."""

    prefix = "scaffold"
    method_name = "scaffold-1up"
    config_sections = {"scaffold": ScaffoldConfig}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if getattr(self.cfg, "controls", "II") != "II":
            raise ValueError(f"{type(self).__name__}: controls must be 'II' (the one uplink "
                             "vector stands for dy and dc only under option II controls)")

    def on_model(self) -> None:
        """Layout, ``c`` and the control step alpha (which depends on the model size)."""
        super().on_model()
        self.alpha = control_step(self.cfg, self.compressor, self.layout.size)

    def apply(self, rnd: int, vectors: list[list[np.ndarray]], replies: list[NodeReply]
              ) -> dict[str, float]:
        """Model step from ``c + delta_i``; ``c += (alpha/N) sum(delta_i)``."""
        deltas = np.stack([vec[0] for vec in vectors]).astype(np.float64)
        c = self.c.astype(np.float64)
        if self.cfg.server_step == "local-steps":
            k = self.steps(replies)[:, None]
            step = -self.cfg.server_lr * self.common.lr * np.mean(k * (c + deltas), axis=0)
        else:
            step = -self.cfg.server_lr * (c + deltas.mean(axis=0))
        self.move_model(step)
        self.c = (c + self.alpha * deltas.sum(axis=0) / self.num_clients()).astype(np.float32)
        return {"control_norm": float(np.linalg.norm(self.c))}


class Scallion(SingleUplink):
    """SCALLION (Huang, Li, Li, ICLR 2024): single uplink with (unbiased) compression."""

    prefix = "scallion"
    method_name = "scallion"
    config_sections = {"scallion": ScallionConfig}


class Scafcom(SingleUplink):
    """SCAFCOM (Huang, Li, Li, ICLR 2024): single uplink, biased compression, client momentum.

    ``beta`` and the momentum options are the clients' (bouquet's client half reads them from
    the run config and keeps ``v_i`` and ``c_i`` in ``context.state``); the server uses the
    compressor arguments to decode and to set ``alpha``.

    Examples
    --------
    >>> from bouquet.strategies import Scafcom
    >>> strategy = Scafcom(beta=0.2, compressor="topk", compressor_ratio=0.05)

    """

    prefix = "scafcom"
    method_name = "scafcom"
    config_sections = {"scafcom": ScafcomConfig}


def build_scaffold(setup: StrategySetup) -> Scaffold:
    """Strategy factory of ``scaffold``."""
    return Scaffold.from_setup(setup)


def build_single_uplink(setup: StrategySetup) -> SingleUplink:
    """Strategy factory of ``scaffold-1up``."""
    return SingleUplink.from_setup(setup)


def build_scallion(setup: StrategySetup) -> Scallion:
    """Strategy factory of ``scallion``."""
    return Scallion.from_setup(setup)


def build_scafcom(setup: StrategySetup) -> Scafcom:
    """Strategy factory of ``scafcom``."""
    return Scafcom.from_setup(setup)


def bad_replies(content: RecordDict) -> list[tuple[str, RecordDict]]:
    """Malformed variants of a valid reply for the conformance suite.

    Covers payloads that do not decode: a value missing, a shape that lies, an extra field, an
    index out of range (top-k family), a second seed (rand-k), zero local steps.
    """
    rec = content[PAYLOAD_RECORD]
    fields = {k: rec[k].numpy() for k in rec.keys()}  # type: ignore[union-attr]

    def with_fields(**changes: np.ndarray) -> RecordDict:
        out = RecordDict()
        for name, r in content.items():
            if name == PAYLOAD_RECORD:
                new = {**fields, **changes}
                r = ArrayRecord({k: Array(np.ascontiguousarray(a)) for k, a in new.items()})
            out[name] = r
        return out

    cases = [("shape lies", with_fields(shape=fields["shape"] + 1)),
             ("extra field", with_fields(junk=np.zeros(1, dtype=np.float32)))]
    if "values" in fields and fields["values"].size:
        cases.append(("value missing", with_fields(values=fields["values"][:-1])))
    if "indices" in fields and fields["indices"].size:
        cases.append(("index out of range",
                      with_fields(indices=np.full_like(fields["indices"], 0xFF))))
    if "seed" in fields:
        cases.append(("two seeds", with_fields(seed=np.repeat(fields["seed"], 2))))
    for packed in ("signs", "levels", "codes", "flags", "gaps"):
        if packed in fields and fields[packed].size:
            cases.append((f"{packed} truncated", with_fields(**{packed: fields[packed][:-1]})))
    metrics = dict(content.metric_records["metrics"])
    metrics[STEPS_METRIC] = 0
    zero_steps = RecordDict({n: r for n, r in content.items() if n != "metrics"})
    zero_steps["metrics"] = MetricRecord(metrics)
    cases.append(("zero local steps", zero_steps))
    return cases
