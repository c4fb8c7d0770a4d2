"""The bottom layer both sides of every method import: wire formats and protocol constants.

Record and field names, the codecs that turn values into Flower records and back, and the
checks that decode what a node sent (:mod:`bouquet.wire.validation`). Numpy and Flower only:
this package imports nothing of ``bouquet`` but :mod:`bouquet.compression` and
:mod:`bouquet.schema`, so strategies (server) and clients (nodes) agree on one definition.
"""
