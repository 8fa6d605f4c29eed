"""The pytest guardrail, at the path a team's tests import::

    from explorer.testing import assert_custom_gradient

It lives in :mod:`explorer.checker.guardrail`; this module keeps the public path.
"""

from explorer.checker.guardrail import assert_custom_gradient

__all__ = ["assert_custom_gradient"]
