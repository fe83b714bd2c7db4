"""LoRA adapters (peft): put on a model for training, saved as a small folder that names its base, loaded back
merged.

A fine-tune of a pretrained model is then megabytes instead of the model's full weights, and the paper's recipe
is unchanged: the skip-aware forward calls the model's own decoder layers, whose projections peft has wrapped in
place. The folder is peft's own format (`adapter_config.json`, `adapter_model.safetensors`), so peft reads it
too; its base is named as it loads from any folder (a real model's short name such as `smollm2-135m`, which
resolves offline; a local model's absolute path; a hub id as given: `skipcore.training.models`). Loading
the folder loads the base, applies the adapter and merges it, so the engine sees a plain model. Chosen decoder
layers can train whole beside it (`--whole-layers`: peft's `modules_to_save`, saved in the same folder).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from skipcore.errors import ModelError, UserError, first_line
from skipcore.files import parse_json
from skipcore.models.safetensors_header import safetensors_problem

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"

_LLAMA_LIKE = {
    "attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}
# per family, the projections each group names; module names are the model's own
TARGET_GROUPS: dict[str, dict[str, tuple[str, ...]]] = {
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "gemma3_text": _LLAMA_LIKE,
    "opt": {"attention": ("q_proj", "k_proj", "v_proj", "out_proj"), "mlp": ("fc1", "fc2")},
    "gpt2": {"attention": ("c_attn", "attn.c_proj"), "mlp": ("c_fc", "mlp.c_proj")},
}


@dataclass(frozen=True)
class LoraSpec:
    """What the `lora_rank`, `lora_alpha`, `lora_dropout`, `lora_targets` and `whole_layers` settings ask for; a
    refusal names the setting (`UserError.field`)."""

    rank: int
    alpha: float | None = None  # scale alpha / rank; default 2 x rank, the usual choice
    dropout: float = 0.05
    targets: tuple[str, ...] = ("attention", "mlp")  # groups above, or the model's own module names
    # decoder layers trained whole (every weight, saved in the adapter folder) instead of through LoRA: the capacity
    # a low-rank update may lack, spent where it matters (the top layers every skip schedule runs)
    whole_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise UserError(f"lora_rank must be >= 1, got {self.rank}", field="lora_rank")
        if self.alpha is not None and not self.alpha > 0:
            raise UserError(f"lora_alpha must be > 0, got {self.alpha}", field="lora_alpha")
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"lora_dropout must be in [0, 1), got {self.dropout}", field="lora_dropout")
        if not self.targets:
            raise UserError("lora_targets names no module; e.g. attention,mlp", field="lora_targets")
        if any(i < 0 for i in self.whole_layers) or len(set(self.whole_layers)) != len(self.whole_layers):
            raise UserError(
                f"whole_layers takes distinct layer indices from 0, got {list(self.whole_layers)}",
                field="whole_layers",
            )

    def modules(self, model_type: str) -> list[str]:
        """The module names LoRA wraps in a model of this family: groups expanded, names kept."""
        groups = TARGET_GROUPS.get(model_type, {})
        out: list[str] = []
        for t in self.targets:
            out.extend(groups.get(t, (t,)))
        return list(dict.fromkeys(out))

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "alpha": self.alpha or 2 * self.rank,
            "targets": list(self.targets),
            "whole_layers": list(self.whole_layers),
        }


def is_adapter_folder(path: str | Path) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()


def base_name(folder: str | Path) -> str:
    """The base model an adapter folder names, checked before anything loads."""
    path = Path(folder) / CONFIG_FILE
    try:
        config = parse_json(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {path}: {e}") from e
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or not base:
        raise ModelError(f"{path} names no base model (base_model_name_or_path)")
    if config.get("peft_type", "LORA") != "LORA":
        raise ModelError(f"{path} is a {config.get('peft_type')} adapter; skipcore loads LoRA adapters")
    weights = Path(folder) / WEIGHTS_FILE
    if not weights.is_file():
        raise ModelError(f"{folder} has {CONFIG_FILE} but no {WEIGHTS_FILE}")
    problem = safetensors_problem(weights)
    if problem:
        raise ModelError(f"{weights} is damaged or incomplete: {problem}; save or copy the adapter again")
    return base


def with_lora(model, spec: LoraSpec, base: str):
    """`model` with trainable LoRA matrices beside its frozen weights (a peft model; its base model, whose
    layers the skip forward calls, is `.get_base_model()`)."""
    peft_model = _peft().get_peft_model(model, lora_config(model, spec))
    peft_model.peft_config["default"].base_model_name_or_path = base
    return peft_model


def lora_config(model, spec: LoraSpec):
    """peft's config for `spec` on `model`, its target modules checked against the model's own."""
    modules = spec.modules(model.config.model_type)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()} | {n for n, _ in model.named_modules()}
    missing = [m for m in modules if m not in names and not any(n.endswith("." + m) for n in names)]
    if missing:
        raise UserError(
            f"lora_targets {', '.join(missing)}: no such module in this {model.config.model_type} model; "
            f"use attention, mlp or module names such as {', '.join(_example_names(model))}",
            field="lora_targets",
        )
    _refuse_containers(model, modules)
    tied = tied_targets(model, modules)
    if tied:
        name, other = tied[0]
        raise UserError(
            f"lora_targets: {_why_tied(name, other)}; choose attention, mlp or modules whose weights are their own",
            field="lora_targets",
        )
    whole, lora_layers = _split_layers(model, spec.whole_layers)
    return _peft().LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha or 2 * spec.rank,
        lora_dropout=spec.dropout,
        target_modules=modules,
        fan_in_fan_out=model.config.model_type == "gpt2",  # GPT-2's Conv1D stores weights transposed
        layers_to_transform=lora_layers if whole else None,
        modules_to_save=whole or None,  # peft trains a copy of each and saves it beside the LoRA matrices
        task_type="CAUSAL_LM",
    )


def _wrappable() -> tuple[type, ...]:
    """The kinds of module peft puts a LoRA on (a projection, an embedding, a convolution); any other it refuses
    with a traceback of its own."""
    import torch
    from transformers.pytorch_utils import Conv1D

    nn = torch.nn
    return (nn.Linear, nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.MultiheadAttention, Conv1D)


def _refuse_containers(model, modules: list[str]) -> None:
    """Refused in one line where a target (as peft matches one: a module's name, or its name's last parts) names
    a module LoRA cannot wrap: a container such as `self_attn` or `layers`, or a norm. The table of groups
    (`attention`, `mlp`) is how a name stands for several projections; a container's name is not expanded, so an
    adapter's targets stay the modules it trains. The message lists the projections under it to name instead."""
    kinds = _wrappable()
    for target in modules:
        for name, module in model.named_modules():
            if not (name == target or name.endswith("." + target)) or isinstance(module, kinds):
                continue
            inside = [n.rsplit(".", 1)[-1] for n, m in module.named_modules() if n and isinstance(m, kinds)]
            inside = list(dict.fromkeys(inside))
            kind = type(module).__name__
            if inside:
                shown = ", ".join(inside[:8]) + (", ..." if len(inside) > 8 else "")
                what = f"holds modules ({kind}), not a layer LoRA can wrap; name the ones under it: {shown}"
                what += " (or use attention, mlp)"
            else:
                what = f"is a {kind}, not a layer LoRA can wrap; use attention, mlp or module names such as "
                what += ", ".join(_example_names(model))
            raise UserError(f"lora_targets {target}: {name} {what}", field="lora_targets")


def tied_targets(model, modules: list[str]) -> list[tuple[str, str]]:
    """(module, another module) pairs where a module `modules` names (as peft matches a target: the module's name,
    or its name's last parts) holds a weight tied to the other's: the output embeddings of a model that ties them
    to its input embeddings (OPT, GPT-2, SmolLM2, Gemma). peft trains the LoRA on the one module; merging writes
    it into the shared tensor, so both change."""
    holders: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        holders.setdefault(id(param), []).append(name.rsplit(".", 1)[0])
    pairs = []
    for name, module in model.named_modules():
        weight = dict(module.named_parameters(recurse=False)).get(
            "weight"
        )  # its own (peft's layer wraps one)
        if weight is None or not any(name == m or name.endswith("." + m) for m in modules):
            continue
        others = [other for other in holders.get(id(weight), []) if other != name]
        if others:
            pairs.append((name, others[0]))
    return pairs


def _why_tied(name: str, other: str) -> str:
    """Why a LoRA on `name`, whose weight is tied to `other`'s, cannot be loaded as it was trained."""
    return (
        f"{name}'s weight is tied to {other}'s in the model; a LoRA on it trains {name} alone, but merged when the "
        f"adapter loads it would change {other} too, so the model loaded would not be the one trained"
    )


# what makes two LoRA configs the same adapter: its shape, scale, where it sits and what trains whole
ADAPTER_FIELDS = {
    "r": "lora_rank",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "target_modules": "lora_targets",
    "layers_to_transform": "whole_layers",
    "modules_to_save": "whole_layers",
}


def check_same_adapter(model, spec: LoraSpec, folder: str | Path) -> None:
    """Refused in one line, naming the setting, where `spec` asks for another adapter than the one saved in
    `folder` (more training of a saved adapter goes on with its own shape)."""
    wanted = lora_config(model, spec)
    saved = parse_json((Path(folder) / CONFIG_FILE).read_text())

    def same(a, b) -> bool:
        if isinstance(a, list | tuple | set) or isinstance(b, list | tuple | set):
            return set(a or ()) == set(b or ())
        return a == b

    for key, setting in ADAPTER_FIELDS.items():
        if not same(getattr(wanted, key), saved.get(key)):
            raise UserError(
                f"{setting}: the adapter in {folder} is not the one these settings ask for; train it on with its "
                f"own: {_own_flags(saved, model.config.model_type)} (or train a new adapter on its base)",
                field=setting,
            )


def _own_flags(saved: dict, model_type: str) -> str:
    """A saved adapter's LoRA settings as the command line's flags (its target modules as a group list where
    they are whole groups)."""
    modules = set(saved.get("target_modules") or ())
    groups = [g for g, names in TARGET_GROUPS.get(model_type, {}).items() if set(names) <= modules]
    grouped = {n for g in groups for n in TARGET_GROUPS[model_type][g]}
    targets = groups + sorted(modules - grouped) if grouped else sorted(modules)
    whole = [name.rsplit(".", 1)[-1] for name in saved.get("modules_to_save") or ()]
    flags = f"--lora-rank {saved.get('r')} --lora-alpha {saved.get('lora_alpha'):g} "
    flags += f"--lora-dropout {saved.get('lora_dropout'):g} --lora-targets {','.join(targets)}"
    return flags + (f" --whole-layers {','.join(whole)}" if whole else "")


def _split_layers(model, whole_layers: tuple[int, ...]) -> tuple[list[str], list[int]]:
    """(the module names of the decoder layers trained whole, the indices of the layers LoRA goes on), both empty
    when no layer trains whole (LoRA then goes on every layer)."""
    if not whole_layers:
        return [], []
    from skipcore.adapters import adapter_for

    layers = adapter_for(model).layers
    out_of_range = [i for i in whole_layers if i >= len(layers)]
    if out_of_range:
        raise UserError(
            f"whole_layers {','.join(map(str, out_of_range))}: this model has layers 0 to {len(layers) - 1}",
            field="whole_layers",
        )
    if len(whole_layers) == len(layers):
        raise UserError(
            "whole_layers names every layer; train without lora_rank to train every weight",
            field=("whole_layers", "lora_rank"),
        )
    names = {id(module): name for name, module in model.named_modules()}
    return [names[id(layers[i])] for i in sorted(whole_layers)], [
        i for i in range(len(layers)) if i not in whole_layers
    ]


def trainable_again(model, folder: str | Path):
    """A saved adapter put back on its base for more training (resuming)."""
    return _applied(model, folder, is_trainable=True)


def save_adapter(peft_model, out: str | Path, dtype=None) -> None:
    """The adapter's config and weights (in `dtype`, default as trained) into `out`."""
    from safetensors.torch import save_file

    out = Path(out)
    state = _peft().get_peft_model_state_dict(
        peft_model, save_embedding_layers=False
    )  # no hub look-up of the base
    if dtype is not None:
        state = {k: v.to(dtype) for k, v in state.items()}
    save_file(
        {k: v.contiguous() for k, v in state.items()}, str(out / WEIGHTS_FILE), metadata={"format": "pt"}
    )
    peft_model.peft_config["default"].save_pretrained(str(out))


def merged(base, folder: str | Path):
    """`base` (the model the adapter folder names, loaded) with the adapter in `folder` merged in: a plain model
    whose every weight trains, as `from_pretrained` gives one (peft froze the base's weights to apply the adapter,
    and merging keeps them frozen, so training it whole trained nothing)."""
    return _applied(base, folder).merge_and_unload().requires_grad_(True)


def _applied(base, folder: str | Path, is_trainable: bool = False):
    """The adapter in `folder` on `base` (a peft model), refused in one line where its tensors do not fit: of other
    shapes, for modules the base lacks, or too few or too many for the base's layers (peft would leave the
    missing ones at their initial values, and drop the rest, with no more than a warning)."""
    from safetensors import SafetensorError

    peft = _peft()
    saved = parse_json((Path(folder) / CONFIG_FILE).read_text())
    targets = saved.get("target_modules") if isinstance(saved, dict) else None
    targets = [targets] if isinstance(targets, str) else targets if isinstance(targets, list) else []
    tied = tied_targets(base, [t for t in targets if isinstance(t, str)])  # another kind: peft's to refuse
    if tied:
        name, other = tied[0]
        raise ModelError(
            f"the adapter in {folder} has a LoRA on {name}: {_why_tied(name, other)}; train the adapter again on "
            "modules whose weights are their own"
        )
    try:
        with warnings.catch_warnings():  # peft's warning lists every missing key; the one line below says it
            warnings.filterwarnings("ignore", message="Found (missing|unexpected) adapter keys")
            model = peft.PeftModel.from_pretrained(base, str(folder), is_trainable=is_trainable)
    except (OSError, SafetensorError) as e:
        first = first_line(e)
        raise ModelError(f"cannot read the adapter in {folder}: {first}; save or copy it again") from e
    except (ValueError, KeyError, RuntimeError) as e:
        raise ModelError(f"the adapter in {folder} does not fit its base model: {_misfit(e)}") from e
    expected = set(peft.get_peft_model_state_dict(model, save_embedding_layers=False))
    saved = _saved_keys(Path(folder) / WEIGHTS_FILE)
    for keys, said in (
        (expected - saved, "adapter tensors the base's modules need are missing"),
        (saved - expected, "of the adapter's tensors have no place in the base"),
    ):
        if keys:
            raise ModelError(
                f"the adapter in {folder} does not fit its base model: {len(keys)} {said}, e.g. {sorted(keys)[0]} "
                "(an adapter made for another model?)"
            )
    return model


SIZE_MISMATCH = re.compile(
    r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[[^\]]*\])\) from checkpoint, "
    r"the shape in current model is torch\.Size\((\[[^\]]*\])\)"
)


def _misfit(e: Exception) -> str:
    """Why torch refused the adapter's tensors, naming one: its shape in the file and the one the base needs
    (torch's own message starts with a line that names no tensor)."""
    text = str(e).strip()
    found = SIZE_MISMATCH.findall(text)
    if found:
        key, saved, wanted = found[0]
        return _other_shapes(len(found), key.replace(".default.", "."), saved, wanted)  # named as in the file
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):  # a heading, then the first case it lists
        return f"{lines[0]} {lines[1]}"
    return lines[0] if lines else type(e).__name__


SAVED_PREFIX = "base_model.model."  # how peft names the base's modules in an adapter's file
LORA_KEY = re.compile(r"(.+)\.lora_([AB])\.weight")


def adapter_misfit(folder: str | Path, config, trust_remote_code: bool = False) -> str | None:
    """Why the adapter in `folder` does not fit a base model of `config`, from its file's header and the base's
    skeleton on the meta device (no weights read): a LoRA matrix whose outer size is not its module's input or
    output size, or a whole tensor of another shape than the base's, said as a load says it (`_other_shapes`).
    None where every tensor it names fits, or the file or a name is the load's to judge. What a tool checks from
    the config alone (the designer, a sweep's plan) before a load would refuse the adapter."""
    from safetensors import SafetensorError, safe_open

    from skipcore.models.skeleton import meta_skeleton, out_in_features

    path = Path(folder) / WEIGHTS_FILE
    try:
        with safe_open(str(path), "pt") as f:
            keys = f.keys()
            shapes = {k.removeprefix(SAVED_PREFIX): list(f.get_slice(k).get_shape()) for k in keys}
    except (OSError, SafetensorError):
        return None  # the load says what is wrong with the file
    skeleton = meta_skeleton(config, trust_remote_code)
    modules = dict(skeleton.named_modules(remove_duplicate=False))
    weights = {name: list(p.shape) for name, p in skeleton.named_parameters(remove_duplicate=False)}
    # in the model's order, as a load names them (the first one found is the example said)
    order = {name: i for i, name in enumerate(modules)}
    wrong = []
    for key, saved in sorted(
        shapes.items(), key=lambda item: (order.get(_module_of(item[0]), len(order)), item[0])
    ):
        lora = LORA_KEY.fullmatch(key)
        if lora is None:
            wanted = weights.get(key)
        elif (sizes := out_in_features(modules.get(lora.group(1)))) is None or len(saved) != 2:
            continue  # not a product's matrix: the load judges it
        else:  # A: (rank, input size); B: (output size, rank)
            wanted = [saved[0], sizes[1]] if lora.group(2) == "A" else [sizes[0], saved[1]]
        if wanted is not None and wanted != saved:
            wrong.append((SAVED_PREFIX + key, str(saved), str(wanted)))
    return _other_shapes(len(wrong), *wrong[0]) if wrong else None


def _module_of(key: str) -> str:
    """The module a saved tensor belongs to: a LoRA matrix's module, or a whole tensor's parent."""
    return key.split(".lora_")[0] if ".lora_" in key else key.rsplit(".", 1)[0]


def _other_shapes(n: int, key: str, saved: str, wanted: str) -> str:
    """The one sentence for `n` adapter tensors of other shapes than the base needs, `key` the first."""
    return (
        f"{n} adapter tensor{'s' if n != 1 else ''} of other shapes than the base's modules need, "
        f"e.g. {key}: {saved} in {WEIGHTS_FILE}, {wanted} for the base (an adapter made for another model?)"
    )


def _saved_keys(path: Path) -> set[str]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as f:
            return set(f.keys())
    except (OSError, SafetensorError) as e:
        raise ModelError(f"cannot read {path}: {e}") from e


def _peft():
    try:
        import peft
    except ImportError as e:
        raise UserError("LoRA adapters need the peft package: pip install peft") from e
    return peft


def _example_names(model) -> list[str]:
    import torch

    names = [n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    return list(dict.fromkeys(names))[:6]
