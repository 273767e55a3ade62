"""The generation engine: one loop and its slot scheduler (``loop``) over any session; a row's token from
``sampling``, masked by ``grammar`` or drafted by ``speculation``; its text from ``detok``, its log-probabilities
from ``logprobs``; what it reports (``metrics``)."""
