"""Check one custom gradient: the checker behind ``python -m explorer verify``, the Editor's and the Explore
page's check panels and the pytest guardrail (:mod:`explorer.testing`), with no streamlit.

``checks`` holds the :class:`~explorer.checker.checks.Check` record and the helpers the checks share;
``user`` runs the checks for every op (:func:`user.check_function`: a built-in is a function with declarations)
and holds those of a one-input elementwise function (built-ins and editor ops included) and of a Keras layer;
``general`` those of every other
signature (several inputs or outputs, reductions, broadcasting, matrix products, captured variables); ``runner`` runs them (:func:`runner.check`,
:func:`runner.check_targets`) and is the command line; ``discover`` finds the functions and layers in a file,
directory or module; ``timelimit`` cuts off a call that does not return; ``guardrail`` is
``assert_custom_gradient``, whose ``snapshot=`` pins the values (``snapshot``; ``pytest_plugin`` adds
``pytest --update-snapshots``).
"""
