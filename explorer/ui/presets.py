"""The presets' views on the Train page: each preset's paper claim, what this run measures, its tables and figures.

The computations are plain functions of :mod:`explorer.train.presets` (pandas in, pandas out) and their
figures pure functions of :mod:`explorer.train.preset_figures`; this module only arranges them. The Train page
(:mod:`explorer.ui.train`) owns the controls and the live session, and hands the ``depth`` preset its session.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from explorer import state as url_state
from explorer.train import preset_figures, presets, spiking, ste_bias
from explorer.train import trainer as train
from explorer.ui.widgets import show_chart

YIN_STEPS_KEY, YIN_LR_KEY = "train.yin_steps", "train.yin_lr"
MONTE_CARLO_KEY = "train.yin_monte_carlo"
STE_P_KEY, STE_T_KEY, STE_SURROGATE_KEY = "train.ste_p", "train.ste_t", "train.ste_surrogate"
VIEW_WIDGETS = {  # PresetView field -> the widget that shows it
    "yin_steps": YIN_STEPS_KEY, "yin_lr": YIN_LR_KEY, "yin_monte_carlo": MONTE_CARLO_KEY,
    "ste_p": STE_P_KEY, "ste_t": STE_T_KEY, "ste_surrogate": STE_SURROGATE_KEY,
}  # fmt: skip


def show_view_state(view: url_state.PresetView) -> None:
    """Put ``view`` into the preset views' widgets (before they render: a preset loads, a link is opened)."""
    for field_name, widget in VIEW_WIDGETS.items():
        st.session_state[widget] = getattr(view, field_name)


def view_state() -> url_state.PresetView:
    """What the preset views' widgets hold (a widget not drawn in the last run: its default)."""
    default = url_state.PresetView()
    return url_state.PresetView(
        **{name: st.session_state.get(widget, getattr(default, name)) for name, widget in VIEW_WIDGETS.items()}
    )


def _seed_view_widgets() -> None:
    default = url_state.PresetView()
    for field_name, widget in VIEW_WIDGETS.items():
        st.session_state.setdefault(widget, getattr(default, field_name))


def ratio_text(value: float) -> str:
    if math.isnan(value):
        return "no gradient in the last layer"
    return "0 (no gradient reaches layer 1)" if value == 0 else f"{value:.3g}"


RATIO_LATEX = r"$\lVert \nabla_{W_1} L \rVert \,/\, \lVert \nabla_{W_D} L \rVert$"

def depth_sentence(table: pd.DataFrame) -> str:
    """What the depth preset's run shows: the measured first / last hidden-layer ratio per scale."""
    def per_layer(ratio: float, depth: int) -> str:
        return f" (×{ratio ** (1 / (depth - 1)):.2g} per layer)" if ratio > 0 and depth > 1 else ""

    at_init = ", ".join(
        f"{row['run']}: **{ratio_text(row['first/last at init'])}**{per_layer(row['first/last at init'], row['depth'])}"
        for row in table.to_dict("records")
    )
    later = ", ".join(f"{row['run']}: {ratio_text(row['first/last at now'])}" for row in table.to_dict("records"))
    epoch = int(table["epoch"].max())
    return (
        f"**This run shows** ({int(table['depth'].iloc[0])} hidden layers, ratio {RATIO_LATEX} of the first to the last "
        f"hidden layer's kernel gradient norm; below 1 the gradient shrinks on its way down, above 1 it grows, "
        f"by about the same factor per layer, so more depth means more of it): "
        f"at initialisation {at_init}; at epoch {epoch}: {later}."
    )

@st.cache_data(show_spinner="Coarse gradient descent, closed form…", max_entries=16)
def _yin(steps: int, lr: float) -> dict[str, pd.DataFrame]:
    return {ste: presets.yin2019(ste, steps=steps, lr=lr) for ste in presets.STES}


@st.cache_data(show_spinner=False, max_entries=1)
def _yin_sweep() -> pd.DataFrame:
    return presets.yin2019_loss_sweep()


@st.cache_data(show_spinner="Sampling 100,000 inputs per STE…", max_entries=1)
def _yin_monte_carlo() -> pd.DataFrame:
    v, w = np.array([0.6, -0.4, 0.9, -1.1]), np.zeros(presets.YIN_INPUT)
    w[:3] = (-0.4, 0.5, 0.3)  # |w| ~ 0.7 (the clipped ReLU's window matters), theta ~ 2.2
    frames = [presets.yin2019_monte_carlo(ste, v, w).assign(ste=ste) for ste in presets.STES]
    return pd.concat(frames, ignore_index=True)


@st.cache_data(show_spinner="Training 10 seeds x 2 networks…", max_entries=1)
def _dann() -> pd.DataFrame:
    return presets.dann()


@st.cache_data(show_spinner="Training 36 spiking networks in time (scale x steepness x reset x 3 seeds)…", max_entries=1)
def _spiking() -> pd.DataFrame:
    return presets.spiking_contrasts()


PAPER_CONTRASTS = (
    "**What the paper reports** (Zenke & Vogels 2021, Fig. 5: bar charts of test accuracy; no numbers are copied "
    "here): the scale of the surrogate derivative matters where its shape does not. A surrogate normalised "
    "asymptotically, so that it tends to the step's true derivative and its peak grows with the steepness, loses "
    "accuracy at large steepness, where a peak-normalised one does not; and leaving the reset out of the gradient "
    "(detached) trains at least as well as differentiating through it."
)


def _spiking_contrasts_view() -> None:
    st.markdown("##### The paper's two contrasts: surrogate scale and reset, in a spiking layer trained in time")
    st.markdown(PAPER_CONTRASTS)
    results = _spiking()
    table = presets.spiking_contrast_table(results)
    worst = table.loc[table["accuracy"].idxmin()]
    peak = table[table["scale"] == "peak-normalised"]["accuracy"]
    detached = table[table["reset"] == "detached"]["accuracy"]
    exploded = table[(table["scale"] == "asymptotic") & (table["reset"] == "differentiable")]["grad_norm_init"].max()
    st.markdown(
        f"**This run shows** (two moons as a constant current into {spiking.HIDDEN} leaky integrate-and-fire units for "
        f"{spiking.TIME_STEPS} steps, sigmoid surrogate, Adam, {spiking.STEPS} steps, mean over {spiking.SEEDS} seeds): "
        f"peak-normalised surrogates reach **{peak.min():.3f} to {peak.max():.3f}** at every steepness and reset; with "
        f"the reset detached every surrogate reaches **{detached.min():.3f} to {detached.max():.3f}**; the asymptotic "
        f"scale with a differentiable reset falls to **{worst['accuracy']:.3f}** at β = {worst['steepness']:g}, its "
        f"gradient at initialisation **{exploded:.3g}** in norm (the reset path multiplies the surrogate's peak "
        "through time)."
    )
    show_chart(preset_figures.spiking_contrast_figure(table), key="train.preset_spiking")
    with st.expander("Every configuration"):
        st.dataframe(table, hide_index=True)
    st.caption(
        "Membrane v ← 0.9 v + Wx + b − s (threshold 1, subtractive reset), spike s = H(v − 1). Asymptotic: the "
        "catalogue's sigmoid surrogate β s(βu) s(−βu) (area 1, peak β/4); peak-normalised: the same divided by its "
        "peak. Detached: the reset term is a constant in the backward pass (tf.stop_gradient)."
    )


@st.cache_data(show_spinner="Training one network per surrogate and steepness…", max_entries=1)
def _shape_scale() -> pd.DataFrame:
    return presets.shape_scale()


@st.cache_data(show_spinner="SGD with five estimators and a catalogue surrogate, 5 seeds x 3,000 steps…", max_entries=64)
def _ste_bias(p: float, t: float, surrogate: str) -> pd.DataFrame:
    return presets.ste_bias(p, t, surrogate=surrogate)


def _ste_bias_view() -> None:
    _seed_view_widgets()
    col_p, col_t, col_op = st.columns(3)
    p = col_p.selectbox("Exponent p", ste_bias.EXPONENTS, format_func=lambda v: f"{v:g}", key=STE_P_KEY)
    t = col_t.slider("Target t", *ste_bias.T_RANGE, step=0.01, key=STE_T_KEY, help="below 1/2, so the optimum is q = 0")
    surrogate = col_op.selectbox(
        "Catalogue surrogate", ste_bias.spike_ops(), key=STE_SURROGATE_KEY,
        help="b = H(θ − ℓ), ℓ = logit(ξ) so that P(b = 1) = σ(θ); the op's custom gradient stands for ∂b/∂θ",
    )  # fmt: skip
    closed = presets.ste_bias_closed_forms(p, t)
    runs = _ste_bias(float(p), float(t), surrogate)
    summary = presets.ste_bias_summary(runs, p, t)
    rows = summary.set_index("estimator")["end q (mean over seeds)"]
    q_star, optimum_loss, star_loss = closed["q"].iloc[1], closed["loss"].iloc[0], closed["loss"].iloc[1]
    st.markdown(
        r"Minimise $L(q) = E_{b \sim \mathrm{Bernoulli}(q)}\,|b - t|^p = q(1-t)^p + (1-q)\,t^p$ over $q = \sigma(\theta)$ "
        r"by SGD on $\theta$ from $q = 1/2$. **Closed forms**: the optimum is $q = 0$ with loss $t^p$ = "
        f"**{optimum_loss:.4f}**; straight-through differentiates $f(b) = |b-t|^p$ in $b$ as if $b$ were $q$, and its "
        r"expectation vanishes at $q^* = \frac{t^{p-1}}{t^{p-1} + (1-t)^{p-1}}$ = "
        f"**{q_star:.4f}**, loss **{star_loss:.4f}**."
    )
    labels = list(ste_bias.ESTIMATORS.values())
    st.markdown(
        f"**This run shows** (p = {p:g}, t = {t:g}, SGD learning rate 0.1, 3,000 steps, mean over 5 seeds of q averaged "
        f"over the last {ste_bias.END_SHARE:.0%} of the steps): the exact gradient ends at q = **{rows[labels[0]]:.3f}**, "
        f"REINFORCE at **{rows[labels[1]]:.3f}** and with a baseline at **{rows[labels[2]]:.3f}** (all heading for 0); "
        f"straight-through settles at **{rows[labels[3]]:.3f}** (identity) and **{rows[labels[4]]:.3f}** (σ′), beside "
        f"q* = {q_star:.3f}; the {surrogate} surrogate at **{rows.iloc[-1]:.3f}**."
    )
    st.dataframe(summary, hide_index=True,
                 column_config={c: st.column_config.NumberColumn(format="%.4f") for c in summary.columns[1:]})  # fmt: skip
    show_chart(preset_figures.ste_bias_figure(runs, closed), key="train.preset_ste_bias")
    st.caption(
        "Every estimator sees the same uniform draws ξ (b = [ξ < q]), so the differences come from the gradient alone. "
        "Straight-through: ∂b/∂θ taken as 1 (identity) or σ′(θ) (Bengio et al. 2013). REINFORCE: f(b)(b − q), the "
        f"baseline a moving average of f (decay {ste_bias.BASELINE_DECAY:g}). The surrogate run trains through "
        "the catalogue op's own @tf.custom_gradient. Faint lines: single seeds."
    )


def _preset_header(preset: presets.Preset) -> None:
    st.subheader(preset.title)
    st.markdown(f"**The paper's claim.** {preset.claim}\n\n**Reference.** {preset.reference}")


def _yin_view() -> None:
    _seed_view_widgets()
    col_steps, col_lr = st.columns(2)
    steps = col_steps.number_input(
        "Steps", min_value=1, max_value=url_state.YIN_MAX_STEPS, step=500, key=YIN_STEPS_KEY,
        help=f"at most {url_state.YIN_MAX_STEPS:,} here (about a second): the steps are a Python loop",
    )
    lr = col_lr.number_input(
        "Learning rate", min_value=url_state.YIN_LR_RANGE[0], max_value=url_state.YIN_LR_RANGE[1], format="%g",
        key=YIN_LR_KEY,
    )
    histories = _yin(int(steps), float(lr))
    summary = presets.yin2019_summary(histories, steps=int(steps))
    rows = summary.set_index("ste").to_dict("index")
    identity = rows["identity"]
    flip_step = identity["w flips at step"]
    flip = "w does not flip" if pd.isna(flip_step) else f"w flips at step {int(flip_step)}"
    st.markdown(
        r"Model $y = v^\top \sigma(Zw)$, $\sigma(x) = \mathbb{1}\{x > 0\}$, $Z \in \mathbb{R}^{4 \times 10}$ with "
        r"i.i.d. $\mathcal{N}(0, 1)$ entries, teacher $v^* = (1, 1, 1, -1)$, $w^* = e_1$; $v$ follows its exact "
        r"expected gradient, $w$ the expected coarse gradient of each STE (closed forms, Lemmas 4 and 7)."
    )
    st.markdown(
        r"**This run shows** (from $v = (-0.2, -0.2, -0.2, 1.8)$, $w = -w^*$, "
        f"loss {identity['start loss']:.3f}; "
        f"{int(steps):,} steps, learning rate {float(lr):g}): ReLU STE ends at loss **{rows['relu']['final loss']:.4f}**, "
        f"clipped ReLU at **{rows['clipped_relu']['final loss']:.4f}**. Identity STE: {flip}, the loss reaches "
        f"**{identity['highest loss']:.3f}**, and it does not settle (final loss {identity['final loss']:.3f})."
    )
    for ste in summary.loc[summary["diverged"], "ste"]:
        st.warning(
            f"The {ste} STE diverged at learning rate {float(lr):g}: v or w left the float range at step "
            f"{rows[ste]['steps']:,}, so its run stops there. A learning rate of 0.1 (the paper's regime) stays finite."
        )
    st.dataframe(
        summary.assign(**{"w flips at step": summary["w flips at step"].map(lambda v: "never" if pd.isna(v) else f"{int(v)}")}),
        hide_index=True,
        column_config={c: st.column_config.NumberColumn(format="%.4f") for c in ("start loss", "final loss", "highest loss", "final theta")},
    )
    show_chart(preset_figures.yin2019_figure(histories), key="train.preset_yin")
    sweep = _yin_sweep()
    singular = sweep.loc[sweep["singular"], "theta"].tolist()
    st.markdown(
        r"The loss over $\theta$ from Lemma 1, and TensorFlow's autodiff of it in $w$ through "
        r"$\theta = \arccos\big(w^\top w^* / (\lVert w \rVert \lVert w^* \rVert)\big)$: "
        f"inf/NaN (singular) at $\\theta$ = {', '.join(f'{t:.4g}' for t in singular)}, exactly where $w$ is parallel to $w^*$. "
        "So the model's own gradient is unusable where these runs sit; the STEs' coarse gradients are finite there."
    )
    show_chart(preset_figures.yin2019_sweep_figure(sweep), key="train.preset_yin_sweep")
    if st.toggle("Check the closed forms against a TensorFlow @tf.custom_gradient STE (Monte Carlo)", key=MONTE_CARLO_KEY):
        check = _yin_monte_carlo()
        worst = float(check["z"].abs().max())
        st.caption(f"100,000 sampled Z per STE; largest |monte carlo - closed form| = {worst:.2f} standard errors.")
        st.dataframe(check, hide_index=True)


def _dann_view() -> None:
    per_seed = _dann()
    summary = presets.dann_summary(per_seed)
    with_reversal, without = summary.iloc[0], summary.iloc[1]
    st.markdown(
        f"**This run shows** (two moons, target rotated {presets.DANN_ROTATION:g}°, {presets.DANN_POINTS} points per domain, "
        f"noise {presets.DANN_NOISE:g}, {presets.DANN_HIDDEN} sigmoid units, "
        r"$\lambda_p = \frac{2}{1 + e^{-10p}} - 1$ at training progress $p$): target accuracy "
        f"**{with_reversal['mean target accuracy']:.3f} ± {with_reversal['std']:.3f}** with gradient reversal against "
        f"**{without['mean target accuracy']:.3f} ± {without['std']:.3f}** without, mean ± std over {int(with_reversal['seeds'])} "
        f"seeds; reversal is better in {int(with_reversal['better in seeds'])} of {int(with_reversal['seeds'])} seeds."
    )
    st.dataframe(summary, hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.3f") for c in ("mean target accuracy", "std", "min", "max")})
    show_chart(preset_figures.dann_figure(per_seed), key="train.preset_dann")
    with st.expander("Every seed"):
        st.dataframe(per_seed, hide_index=True)


def _shape_scale_view() -> None:
    results = _shape_scale()
    shaped = results[results["steepness"].notna()]
    identity = results.loc[results["surrogate"] == "identity STE", "accuracy"].iloc[0]
    true = results.loc[results["surrogate"] == "true gradient", "accuracy"].iloc[0]
    st.markdown(
        f"**This run shows** (one Heaviside layer of 16 units, noisy moons, Adam, {presets.SHAPE_SCALE_EPOCHS} epochs, same "
        f"initial weights): every shaped surrogate reaches **{shaped['accuracy'].min():.3f} to {shaped['accuracy'].max():.3f}** "
        f"over steepness {', '.join(f'{v:g}' for v in sorted(shaped['steepness'].unique()))}; the identity STE "
        f"**{identity:.3f}**; the true gradient **{true:.3f}** (no gradient reaches the hidden layer: only the output "
        "layer learns). With Adam the gradient's overall size is normalised away in this one-layer net; the depth "
        "preset shows where scale bites."
    )
    table = presets.shape_scale_table(results)
    st.caption("Accuracy after training, by surrogate and steepness (slope or alpha); '-': no steepness.")
    st.dataframe(table.style.format(precision=3, na_rep=""), hide_index=True)
    show_chart(preset_figures.shape_scale_figure(results), key="train.preset_shape_scale")
    with st.expander("Every run"):
        st.dataframe(results, hide_index=True)


def _depth_view(session: train.Session | None) -> None:
    epoch, results = session.snapshot() if session is not None else (0, [])
    if epoch == 0:
        st.markdown(
            "**This run shows**: the three networks train below (press Start if they are not training); the "
            "measured first / last layer ratios appear live under *Gradient flow through depth* from the first "
            "epoch, and here once training stops."
        )
        return
    st.markdown(depth_sentence(presets.gradient_flow_table(results)))


def view(key: str, live_session: train.Session | None = None) -> None:
    """The preset's box: title, claim, reference and what this run shows. ``live_session``: the Train page's
    session when it is exactly the live preset's (the depth preset reads its numbers from it), else None."""
    preset = presets.get(key)
    with st.container(border=True):
        _preset_header(preset)
        if key == "yin2019":
            _yin_view()
        elif key == "dann":
            _dann_view()
        elif key == "ste_bias":
            _ste_bias_view()
        elif key == "zenke2021":
            _shape_scale_view()
            _spiking_contrasts_view()
        else:
            _depth_view(live_session)
        if not preset.live and preset.state.runs:
            st.caption("The controls below are set to a live version of this experiment: press **Start** to watch it train.")
