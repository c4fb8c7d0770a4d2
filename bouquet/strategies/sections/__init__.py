"""The methods' configuration sections, in modules of their own.

A run config is checked against every method's keys (:mod:`bouquet.apps.config`), and every
message of a deployment does that check in a fresh process. The sections therefore live here,
apart from the strategies that use them: resolving a run config imports these small dataclass
modules, never a strategy module (and with it the round loop, the reply checks and the method's
server math). The strategy modules import their sections from here (``from
bouquet.strategies.scaffold import ScafcomConfig`` still works).
"""
