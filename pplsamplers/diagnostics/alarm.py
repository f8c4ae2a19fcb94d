"""The warning a failed end-of-run self-check issues (:mod:`pplsamplers.diagnostics.checks`)."""

from __future__ import annotations


class SelfCheckWarning(UserWarning):
    """Issued when the end-of-run self-check fails: a run that is probably wrong.

    Its message is one line, ``pplsamplers self-check FAILED: <what, with its numbers>. Try:
    <the fix>``.  Filter it as any warning: an ``"error"`` filter turns a wrong run into an
    exception, so that a script or a pipeline stops there.

    Examples
    --------
    >>> import warnings
    >>> from pplsamplers import SelfCheckWarning
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", SelfCheckWarning)  # a wrong run stops the script
    ...     try:
    ...         warnings.warn("pplsamplers self-check FAILED: R-hat 1.31 on tau", SelfCheckWarning)
    ...     except SelfCheckWarning as failure:
    ...         print(failure)
    pplsamplers self-check FAILED: R-hat 1.31 on tau
    """


__all__ = ["SelfCheckWarning"]
