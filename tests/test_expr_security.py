"""Hostile and random input to the expression language: only ExpressionError, nothing executed.

Value policy (tested by the property tests): an accepted expression always evaluates, without an
exception, to a tensor shaped like x in x's dtype; its values may be finite, NaN or +-inf
(``exp(exp(x))`` overflows float32) -- the gradient checker, not the parser, reports those.
"""

import ast
import builtins
import contextlib
import importlib.util
import itertools

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer import expr
from explorer.expr import ExpressionError

TRIPPED = []


def trip(*_args, **_kwargs):
    """Hostile inputs below try to call this; if any of them ran, TRIPPED is not empty."""
    TRIPPED.append(True)


@contextlib.contextmanager
def watching_builtins():
    """Record every call of open/eval/exec/__import__ and of compile() to a code object."""
    calls = []
    names = ("open", "eval", "exec", "compile", "__import__")
    originals = {name: getattr(builtins, name) for name in names}

    def recorder(name):
        def record(*args, **kwargs):
            flags = args[3] if len(args) > 3 else kwargs.get("flags", 0)
            if not (name == "compile" and flags & ast.PyCF_ONLY_AST):  # ast.parse itself: parse only
                calls.append((name, args[:1]))
            return originals[name](*args, **kwargs)

        return record

    for name in names:
        setattr(builtins, name, recorder(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(builtins, name, original)


CALL_TRIP = "__import__('tests.test_expr_security').test_expr_security.trip()"
HOSTILE = [
    ("__class__", "names starting with '_'"),
    ("__builtins__", "names starting with '_'"),
    ("().__class__.__bases__", "attribute access ('.__bases__', a double-underscore name)"),
    ("().__class__.__base__.__subclasses__()", "attribute access"),
    ("x.real", "attribute access ('.real')"),
    (CALL_TRIP, "attribute access"),
    ("__import__('os')", "calling '__import__'"),
    ("import os", "syntax error"),
    ("from os import system", "syntax error"),
    ("lambda: trip()", "lambda"),
    ("(lambda: 0)()", "lambda"),
    ("[trip() for _ in 'a']", "comprehensions"),
    ("{k: 1 for k in x}", "comprehensions"),
    ("(trip() for _ in x)", "generator expressions"),
    ("open('/tmp/expr_pwned', 'w')", "calling 'open'"),
    ("getattr(x, '__class__')", "calling 'getattr'"),
    ("globals()", "calling 'globals'"),
    ("eval('trip()')", "calling 'eval'"),
    ("exec('trip()')", "calling 'exec'"),
    ("compile('1', '', 'eval')", "calling 'compile'"),
    ("trip()", "calling 'trip'"),
    ("abs(*x)", "starred arguments"),
    ("abs(x=1)", "keyword arguments"),
    ("abs(x, **{})", "keyword arguments"),
    ("'trip()'", "strings"),
    ("f'{trip()}'", "f-strings"),
    ("b'x'", "strings and bytes"),
    ("9 ** 9 ** 9", "exponent 3.8742e+08"),  # value, limit and position: tests/test_expr.py
    ("x ** 1000", "exponent 1000"),
    ("x" * 10_000, "10000 characters long is not allowed"),
    ("(" * 1000 + "x" + ")" * 1000, "2001 characters long"),
    ("(" * 200 + "x" + ")" * 200, "nested more than 30"),
    ("-" * 400 + "x", "nested more than 30"),
    ("x" + " + x" * 40, "nested more than 30"),
    ("\u0445 + 1", "CYRILLIC SMALL LETTER HA"),  # Cyrillic 'х' looks like x
    ("\u0430bs(x)", "CYRILLIC SMALL LETTER A"),
    ("x\u200b", "ZERO WIDTH SPACE"),
    ("(y := 1)", "assignment expressions"),
    ("x[0]", "subscripts"),
    ("x[::-1]", "subscripts"),
    ("1 if x else 0", "conditional expressions"),
    ("x > 0 and x < 1", "'and' / 'or'"),
    ("x or trip()", "'and' / 'or'"),
    ("not x", "'not'"),
    ("x | 1", "bitwise '|'"),
    ("x & 1", "bitwise '&'"),
    ("x ^ 2", "bitwise '^'"),
    ("~x", "bitwise '~'"),
    ("x << 2", "bit shift"),
    ("x @ x", "'@'"),
    ("x // 2", "'//'"),
    ("x % 2", "'%'"),
    ("1j", "complex numbers"),
    ("x * 2j", "complex numbers"),
    ("1e400", "inf"),
    ("1" + "0" * 400, "inf"),
    ("None", "constant None"),
    ("True", "constant True"),
    ("...", "constant Ellipsis"),
    ("abs(x)(1)", "calling the result of an expression"),
    ("abs(x).__class__", "attribute access"),
    ("", "empty"),
    ("   ", "empty"),
    ("x; trip()", "';'"),
    ("x = 1", "syntax error"),
    ("x\n+ trip()", "line breaks"),
    ("x\r", "line breaks"),
    ("x\x00", "control character"),
    ("x # trip()", "comments"),
    ("x is 0", "'is' / 'in'"),
    ("x in [1]", "'is' / 'in'"),
    ("x, 1", "tuples"),
    ("[x]", "lists"),
    ("{x}", "sets"),
    ("{1: x}", "dicts"),
    ("await x", None),
    ("(yield x)", None),
    ("abs", "without a call"),
    ("y + 1", "the name 'y'"),
    ("x ** x", "depends on x"),
    ("print(x)", "calling 'print'"),
    ("type(x)", "calling 'type'"),
    ("\\x", "syntax error"),
    ("{x for x in [1]}", "comprehensions"),
    ("(yield from x)", "yield"),
    ("x >> 2", "bit shift '>>'"),
]


def _syntax_in(text: str) -> set[type]:
    """The AST node types and binary operator types Python's own parser finds in ``text``."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return set()
    nodes = list(ast.walk(tree))
    return {type(node) for node in nodes} | {type(node.op) for node in nodes if isinstance(node, ast.BinOp)}


def test_hostile_list_tries_every_construct_the_parser_forbids():
    """Measured against the parser's own tables, not the list's length: a construct added to the
    forbidden tables without a hostile case here fails this test."""
    parse_module = importlib.import_module("explorer.expr.parse")  # the module; ``expr.parse`` is its function

    forbidden = set(parse_module._FORBIDDEN_NODES) | set(parse_module._FORBIDDEN_BINARY)
    tried = set().union(*(_syntax_in(text) for text, _ in HOSTILE))
    assert sorted(kind.__name__ for kind in forbidden - tried) == []


@pytest.mark.parametrize(("text", "fragment"), HOSTILE, ids=[f"{i}:{t[:30]!r}" for i, (t, _) in enumerate(HOSTILE)])
def test_hostile_input_is_rejected_and_nothing_runs(text, fragment):
    with pytest.raises(ExpressionError) as info, watching_builtins() as calls:
        expr.parse(text)
    assert calls == [] and TRIPPED == []
    assert "not allowed" in str(info.value) or "syntax error" in str(info.value)
    if fragment is not None:
        assert fragment in str(info.value)


@pytest.mark.parametrize(("text", "fragment"), HOSTILE[:20])
def test_hostile_forward_or_gradient_is_rejected_by_compile_op(text, fragment):
    for position in ("forward", "gradient"):
        texts = {"forward": "x", "gradient": "1", position: text}
        with pytest.raises(ExpressionError) as info, watching_builtins() as calls:
            expr.compile_op("hostile", texts["forward"], texts["gradient"], params={"k": (1.0, 0.0, 2.0)})
        assert calls == [] and TRIPPED == [] and info.value.expression == position


def test_non_text_input_is_rejected():
    for value in (None, 3, b"x", ["x"], ast.parse("x", mode="eval")):
        with pytest.raises(ExpressionError, match="must be text"):
            expr.parse(value)


def test_too_many_parts_is_rejected():
    # a balanced tree of 64 '--x' leaves: 255 nodes, 9 levels, under 500 characters
    parts = ["--x"] * 64
    while len(parts) > 1:
        parts = [f"({a}+{b})" for a, b in zip(parts[::2], parts[1::2], strict=True)]
    text = parts[0]
    assert len(text) <= expr.MAX_LENGTH
    with pytest.raises(ExpressionError, match="more than 200 parts"):
        expr.parse(text)


def test_sentinel_would_see_a_real_call():
    """The watch is real: the same builtins it patches record a call made while watching."""
    with watching_builtins() as calls:
        builtins.eval("1")  # noqa: S307 - constant text, proves the recorder works
    assert calls == [("eval", ("1",))]


# -- property-based ----------------------------------------------------------------------------

GRID32 = np.linspace(-3, 3, 61, dtype=np.float32)
UNARY_FUNCTIONS = sorted(name for name, function in expr.FUNCTIONS.items() if function.arity == 1)
NUMBERS = st.one_of(
    st.integers(0, 20).map(str),
    st.floats(0, 100, allow_nan=False, allow_infinity=False).map(repr),
)
LEAVES = st.one_of(NUMBERS, st.sampled_from(["x", "x", "k", "pi", "e"]))
EXPONENTS = st.sampled_from(["-3", "-1", "0.5", "2", "3", "16", "k", "-k", "(1 / 3)"])


def _grow(children):
    triple = st.tuples(children, children, children)
    return st.one_of(
        st.tuples(children, st.sampled_from("+-*/"), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda a: f"-({a})"),
        st.tuples(children, EXPONENTS).map(lambda t: f"({t[0]}) ** {t[1]}"),
        st.tuples(children, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        st.tuples(st.sampled_from(UNARY_FUNCTIONS), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["minimum", "maximum"]), children, children).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        triple.map(lambda t: f"where({t[0]}, {t[1]}, {t[2]})"),
        triple.map(lambda t: f"clip({t[0]}, {t[1]}, {t[2]})"),
    )


VALID_EXPRESSIONS = st.recursive(LEAVES, _grow, max_leaves=12)
GRAMMAR_CHARACTERS = "xkpie0123456789.+-*/()<>=!, abcdfghlmnoqrstuwz_[]{}'\"@%&|^~:;#\\\t\nхπ"
_module_numbers = itertools.count()


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("exported")


def _exported_function(tree, directory):
    """The exported source as a module defining f(x, k), imported as the code exporter does."""
    name = f"exported_{next(_module_numbers)}"
    path = directory / f"{name}.py"
    path.write_text(f"import tensorflow as tf\n\n\ndef f(x, k):\n    return {expr.to_python_source(tree)}\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def _check_evaluates(tree):
    x = tf.constant(GRID32)
    values = expr.to_tf(tree, x, {"k": 1.5})
    assert values.shape == x.shape and values.dtype == tf.float32
    numpy_values = expr.to_numpy(tree, GRID32, {"k": 1.5})
    assert numpy_values.shape == GRID32.shape and numpy_values.dtype == np.float32
    return values


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=80), st.text(alphabet=GRAMMAR_CHARACTERS, max_size=60)))
def test_random_text_only_raises_expression_error(text):
    try:
        tree = expr.parse(text, ["k"])
    except ExpressionError as error:
        assert error.expression == "expression" and str(error)
        return
    _check_evaluates(tree)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=VALID_EXPRESSIONS)
def test_valid_expressions_evaluate_and_export_the_same_ops(text, export_dir):
    try:
        tree = expr.parse(text, ["k"])
    except ExpressionError as error:  # only a size limit may reject a grammatical expression
        assert any(limit in str(error) for limit in ("characters long", "nested more than", "parts")), str(error)
        return
    values = _check_evaluates(tree)
    exported = _exported_function(tree, export_dir)(tf.constant(GRID32), tf.constant(1.5, tf.float32))
    np.testing.assert_array_equal(exported.numpy(), values.numpy())  # same ops: bit for bit, NaN in the same places

    spec = expr.compile_op("random_op", text, text, params={"k": (1.5, 0.0, 3.0)})
    x = tf.constant(GRID32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spec.apply(x)
    grad = tape.gradient(y, x)
    assert grad.shape == x.shape and grad.dtype == tf.float32
    np.testing.assert_array_equal(grad.numpy(), values.numpy())  # upstream 1: the custom gradient is g(x)


@pytest.mark.parametrize("text", ["open('f')", "x.real", "trip()", "x if x else x", "[x][0]"])
def test_back_ends_refuse_trees_that_parse_did_not_validate(text):
    unchecked = ast.parse(text, mode="eval")
    for render in (
        lambda tree: expr.to_tf(tree, tf.constant([1.0]), {}),
        lambda tree: expr.to_numpy(tree, np.array([1.0]), {}),
        expr.to_python_source,
    ):
        with pytest.raises(ExpressionError, match="not allowed"), watching_builtins() as calls:
            render(unchecked)
        assert calls == [] and TRIPPED == []
