"""Node side of every method: functions a Flower user calls from their own ``@app.train()``.

Each method family has a public function that takes the message, the context and the user's own
model and data, and returns the Flower reply (``Message(content, reply_to=msg)``) carrying what
the method's strategy expects (``num-examples`` included). Method hyperparameters are keyword
arguments named as the method's config section names them; they must match the server's (its
reply validation rejects a mismatched reply). Per-client memory (control variates, momentum,
error-feedback residuals, frames, accountants, bandit trees) lives in ``context.state``.

Gradient methods (``model``: a torch ``nn.Module`` that receives the message's ``arrays``;
``batches``: any iterable of batches, iterated afresh each epoch; ``loss_fn(model, batch)``):

=========================================  ====================================================
``fedavg.train``                           FedAvg (the whole model back)
``scaffold.train``                         SCAFFOLD (``dy`` and ``dc`` up; option II or I)
``scaffold.train_single_uplink``           single-uplink SCAFFOLD (``scaffold-1up``)
``scallion.train``                         SCALLION (unbiased compression)
``scafcom.train``                          SCAFCOM (biased compression + local momentum)
``compressed_fedavg.train``                FedAvg with a compressed uplink (``fedavg-compressed``)
``fed_ef.train``                           Fed-EF (compressed uplink + error feedback)
``fedcg.train``                            FedCG (top-k at the ratio the server sends)
=========================================  ====================================================

Zeroth-order: ``fedkseed.train(msg, context, model, batches, loss_fn, **options)`` with a
forward-only ``loss_fn(model, batch) -> float`` (FedKSeed and FedKSeed-Pro; the server's message
says which), and ``fedkseed.global_model`` for evaluation.

LoRA family (the user's PEFT-wrappable model, training rows ``x``, ``y``, ``loss_fn(model, x, y)``,
``target_modules``; DP-SGD with ``dp=...`` and ``example_loss_fn``): ``fedit.train``,
``ffa_lora.train``, ``fed_sb.train``.

Bandits: ``linucb.train(msg, context, source, context_dim=..., variant=...)`` with a
:class:`~bouquet.clients.linucb.RewardSource` (``contexts(rnd, step)``,
``reward(rnd, step, arm)``); ``variant`` is ``"none"``, ``"ldp"``, ``"sdp-amp"`` or
``"sdp-vecsum"``.

Example::

    from bouquet.clients import scafcom

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return scafcom.train(msg, context, MyNet(), my_loader(context),
                             lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                             lr=0.05, local_steps=10, beta=0.2, compressor="topk")

bouquet's own ClientApp (:mod:`bouquet.apps.client_app`) calls the same functions through the
``*Client`` procedures, with the catalogue task's model and data. See docs/clients.md.
Torch, PEFT and Opacus live here, never on servers.
"""
