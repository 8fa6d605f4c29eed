"""The pytest guardrail, at the path a team's tests import::

    from explorer.testing import GradientCheckWarning, assert_custom_gradient

It lives in :mod:`explorer.checker.guardrail`; this module keeps the public path. Each ``warn`` row is a
:class:`GradientCheckWarning` (a ``UserWarning``): ``filterwarnings = ["error::explorer.testing.GradientCheckWarning"]``
in a team's pytest configuration makes them failures.
"""

from explorer.checker.guardrail import GradientCheckWarning, assert_custom_gradient

__all__ = ["GradientCheckWarning", "assert_custom_gradient"]
