"""The one exception compressors raise for payloads that do not decode."""


class PayloadError(ValueError):
    """A compressed payload that does not decode.

    Missing field, wrong dtype or length, index out of range, non-finite value. Strategies turn
    it into a rejected reply.
    """
