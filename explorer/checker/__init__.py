"""Check one custom gradient: the checker behind ``python -m explorer verify``, the Editor's and the Explore
page's check panels and the pytest guardrail (:mod:`explorer.testing`), with no streamlit.

``checks`` holds the :class:`~explorer.checker.checks.Check` record and the checks of a built-in op;
``user`` the checks of a team's own function or Keras layer; ``runner`` runs them (:func:`runner.check`,
:func:`runner.check_targets`) and is the command line; ``discover`` finds the functions and layers in a file,
directory or module; ``timelimit`` cuts off a call that does not return; ``guardrail`` is
``assert_custom_gradient``, whose ``snapshot=`` pins the values (``snapshot``; ``pytest_plugin`` adds
``pytest --update-snapshots``).
"""
