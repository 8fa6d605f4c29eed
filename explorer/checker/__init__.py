"""Check one custom gradient: the checker behind ``python -m explorer verify``, the Editor's and the Explore
page's check panels and the pytest guardrail (:mod:`explorer.testing`), with no streamlit.

Modules, named for what they hold:

* ``common``: the :class:`~explorer.checker.common.Check` record (levels pass, skip, warn, fail), the
  :class:`~explorer.checker.common.Subject` the checks take, each tolerance and the hard input values (once),
  and the public helpers that word a result;
* ``checks``: one function per check (``check_finite``, ``check_shape_dtype``, ``check_graph``,
  ``check_keras_fit``, ``check_special_points``, ``check_vs_autodiff``, ``check_kink``, ``check_saved_model``,
  ``check_second_order``, the opt-in ``check_forward_mode``), each taking the function's signature into account
  by calling ``elementwise`` (one input, elementwise: on a sweep) or ``any_signature`` (several inputs or
  outputs, reductions, matrix products, variables: at the input assignments :func:`ops.inputs.find_inputs`
  finds); ``higher_order`` holds the bodies of ``second_order`` and ``forward_mode`` for both;
* ``layer``: the checks of a Keras layer, and the ``Model.fit`` and ``model.export`` helpers a layer goes through;
* ``plan``: which checks run in which order (:func:`~explorer.checker.plan.check_function`,
  :func:`~explorer.checker.plan.check_layer`), each within a time limit (``timelimit``);
* ``runner``: :func:`~explorer.checker.runner.check`, :func:`~explorer.checker.runner.check_targets` and the
  command line; ``discover`` finds the functions and layers in a file, directory or module;
* ``guardrail``: ``assert_custom_gradient``, whose ``snapshot=`` pins the values (``snapshot``;
  ``pytest_plugin`` adds ``pytest --update-snapshots``).
"""
