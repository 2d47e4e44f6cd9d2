"""One `DeviceProfile` per GPU model: everything the models need to know about it, each part with its source.

A GPU's folder, `specs/<gpu>/`, holds `profile.toml` (its spec, its node, which parts it borrows from another
GPU and which it has none of) and the data files of the parts measured on it:

| part           | file                | what it is                                                     |
| ---            | ---                 | ---                                                            |
| `nccl`         | `nccl.json`         | NCCL cost-model tuning (`NcclTuning`), fitted                  |
| `power`        | `power.json`        | board power limit and energies (`PowerCap`), fitted            |
| `sharing`      | `sharing.json`      | compute/NCCL interference on one GPU (`GpuSharing`), fitted    |
| `host`         | `host.json`         | host CPU time per kind of call (`HostConstants`), fitted       |
| `host_contention` | `host_contention.json` | how contended those hosts were (`HostContention`), fitted |
| `chip_variation` | `chip_variation.json` | how much chips differ in tensor-core speed (`ChipVariation`), fitted |
| `python_prices` | `python_prices.json` | library Python's own time per call on those hosts (`PythonPrices`), fitted |
| `calibration`  | `calibration.json`  | the compute model's analytic efficiencies (`Calibration`)      |
| `kernels`      | `kernels.jsonl`     | measured kernel times (`KernelDatabase`)                       |
| `gemm_kernels` | `gemm_kernels.json` | which kernel cuBLAS runs per GEMM problem (`GemmKernelTable`)  |

A part uses the GPU's own file when there is one. Otherwise `[borrow]` in profile.toml names the GPU whose file
stands in (the part is then marked `borrowed_from`, and the run summary lists it), or `[absent]` says why the GPU
has none (only `power`, `kernels` and `gemm_kernels` may be absent: no power limit, no measured kernels, no
first-launch costs). The fitted files are shaped {"model", "gpu", "constants": {field: value}, "sources":
{field: "<fit script> on <data path>"}}; the fits write them through benchmarks/common/fitted.py. A field of the
GPU's own file that another GPU's measurements gave says "borrowed from <gpu>" in its source, and the run summary
lists it beside the borrowed parts (`Part.borrowed_fields`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Callable, Generic, Mapping, TypeVar

from phantora.models.chip_variation import ChipVariation
from phantora.models.compute import Calibration, KernelDatabase
from phantora.models.gemm_kernels import GemmKernelTable
from phantora.models.gpu import GpuSpec, GpuVariant
from phantora.models.host import HostConstants
from phantora.models.host_contention import HostContention
from phantora.models.interference import GpuSharing
from phantora.models.network.config import NCCL_TABLE_SOURCES, NcclTuning, NodeDefaults, PerProtocol
from phantora.models.power import PowerCap
from phantora.models.python_prices import PythonPrices

T = TypeVar("T")

PART_FILES: Mapping[str, str] = {
    "nccl": "nccl.json", "power": "power.json", "sharing": "sharing.json", "host": "host.json",
    "host_contention": "host_contention.json", "python_prices": "python_prices.json", "calibration": "calibration.json",
    "kernels": "kernels.jsonl", "gemm_kernels": "gemm_kernels.json", "chip_variation": "chip_variation.json",
}
"""Each part of a profile and its file in a GPU's folder."""
MAY_BE_ABSENT = frozenset({"power", "kernels", "gemm_kernels"})
"""Parts a GPU may lack: the simulation runs without a power limit, measured kernels or first-launch costs."""
PART_NAMES: Mapping[str, str] = {
    "nccl": "NCCL tuning", "power": "power", "sharing": "sharing", "host": "host",
    "host_contention": "host contention", "python_prices": "library Python prices", "calibration": "calibration",
    "kernels": "kernel database", "gemm_kernels": "GEMM kernel table", "chip_variation": "chip variation",
}
"""How the run summary names each part."""

_GB = 1e9
_GBIT = 1e9 / 8


class UnknownGpuError(ValueError):
    """Raised for a GPU name that has no profile; the message lists the known ones."""


class ProfileError(ValueError):
    """A profile file that cannot be read as its part: the message names the file."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Part(Generic[T]):
    """One input of the models for one GPU, and where it comes from."""

    value: T
    source: str
    """The file it was read from (`specs/<gpu>/<file>`), or why the GPU has none."""
    borrowed_from: str | None = None
    """The GPU whose file stands in for this GPU's; None for the GPU's own (or absent) part."""
    borrowed_fields: Mapping[str, str] = field(default_factory=dict)
    """Fields of the GPU's own file that another GPU's measurements gave (their sources say "borrowed from <gpu>"),
    field -> that GPU."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceProfile:
    """Everything Phantora knows about one GPU model; built by `load_profile`, never by hand."""

    key: str
    """Short name used on the command line, e.g. "h200"."""
    spec: GpuSpec
    node: NodeDefaults
    nccl: Part[NcclTuning]
    power: Part[PowerCap | None]
    """None: the GPU runs without a power limit (`[absent]`)."""
    sharing: Part[GpuSharing]
    host: Part[HostConstants]
    host_contention: Part[HostContention]
    """How contended the hosts that `host` was measured on were: `--host-contention h200-vm` simulates such hosts."""
    python_prices: Part[PythonPrices]
    """Library functions' own host time per call, measured on the hosts `host` was (models/python_prices.py)."""
    calibration: Part[Calibration]
    kernels: Part[KernelDatabase]
    """Empty where no kernel was measured on this GPU: the analytic model alone."""
    gemm_kernels: Part[GemmKernelTable]
    chip_variation: Part[ChipVariation]
    """How much chips of this model differ in tensor-core speed: a job runs at its slowest chip's pace."""
    absent: Mapping[str, str] = field(default_factory=dict)
    """Parts the GPU has none of, with why (profile.toml's `[absent]`)."""

    def parts(self) -> dict[str, Part]:
        return {name: getattr(self, name) for name in PART_FILES}

    def borrowed(self) -> dict[str, str]:
        """Part -> the GPU it is borrowed from, for the parts that are, and "part.field" -> that GPU for the fields of
        the GPU's own files that are."""
        lent = {name: part.borrowed_from for name, part in self.parts().items() if part.borrowed_from}
        for name, part in self.parts().items():
            lent.update({f"{name}.{f}": lender for f, lender in part.borrowed_fields.items()})
        return lent


# --- the GPUs shipped ---------------------------------------------------------------------------------
def _specs_root() -> Traversable:
    return resources.files("phantora.specs")


@cache
def known_gpus() -> tuple[str, ...]:
    """Keys of the GPUs that have a profile (a folder of specs/ with profile.toml), sorted."""
    return _gpus_in(_specs_root())


def _gpus_in(root: Traversable) -> tuple[str, ...]:
    return tuple(sorted(d.name for d in root.iterdir() if d.is_dir() and d.joinpath("profile.toml").is_file()))


def gpu_key(name: str, root: Traversable | None = None) -> str:
    """The profile key of a GPU name as a user gives it ("H100" -> "h100"); UnknownGpuError if none."""
    known = known_gpus() if root is None else _gpus_in(root)
    key = name.lower()
    if key not in known:
        raise UnknownGpuError(f"unknown GPU '{name}'; known GPUs: {', '.join(known)}")
    return key


@cache
def load_profile(name: str) -> DeviceProfile:
    """The profile of GPU `name` (case-insensitive) shipped with Phantora, read once per process."""
    key = gpu_key(name)
    return load_profile(key) if key != name else read_profile(key, _specs_root())


def profile_for(name: str, variant: Mapping[str, Any] | None = None) -> DeviceProfile:
    """The profile of GPU `name`, or of its variant given as `GpuVariant`'s fields (what a rank receives in its
    `RankConfig`)."""
    profile = load_profile(name)
    return profile if not variant else apply_variant(profile, GpuVariant(**variant))


def apply_variant(profile: DeviceProfile, variant: GpuVariant) -> DeviceProfile:
    """The profile of a variant of `profile`'s GPU: its spec (`GpuVariant.apply`), its power limit, and the
    base's measurements, which the models carry over as Note [GPU variants] says; ValueError names the
    variant's field that cannot be applied."""
    spec = variant.apply(profile.spec)
    derived = dict(spec.derived)
    if len(profile.kernels.value) and {"memory_bandwidth_gbytes_per_s", "boost_clock_mhz"} & variant.given().keys():
        derived["kernel times"] = (f"measured on the {profile.key}, scaled by the compute model's roofline "
                                   "(memory-bound with HBM bandwidth, compute-bound with the clock)")
    power = profile.power
    if variant.power_limit_w is not None:
        if power.value is None:
            raise ValueError(f"power_limit_w: the {profile.key} profile has no power model ({power.source})")
        try:
            cap = dataclasses.replace(power.value, cap_w=variant.power_limit_w)
        except ValueError as error:
            raise ValueError(f"power_limit_w = {variant.power_limit_w:g}: {error}") from None
        power = dataclasses.replace(power, value=cap)
        derived["power"] = f"limit {variant.power_limit_w:g} W given; energies per FLOP and byte the {profile.key}'s"
    spec = dataclasses.replace(spec, derived=derived)
    return dataclasses.replace(profile, spec=spec, power=power)


def read_profile(name: str, root: Traversable) -> DeviceProfile:
    """The profile of GPU `name` from the folders under `root` (laid out as specs/), read now."""
    key = gpu_key(name, root)
    where = f"specs/{key}/profile.toml"
    try:
        toml = tomllib.loads(root.joinpath(key, "profile.toml").read_text())
    except tomllib.TOMLDecodeError as error:
        raise ProfileError(f"{where}: not valid TOML: {error}") from None
    return _build(key, toml, root)


def _build(key: str, toml: dict[str, Any], root: Traversable) -> DeviceProfile:
    where = f"specs/{key}/profile.toml"
    borrow, absent = dict(toml.get("borrow", {})), dict(toml.get("absent", {}))
    borrow.pop("why", None)
    unknown = sorted((set(borrow) | set(absent)) - set(PART_FILES))
    if unknown:
        raise ProfileError(f"{where}: unknown part(s) {unknown}; parts: {', '.join(PART_FILES)}")
    if not_absent := sorted(set(absent) - MAY_BE_ABSENT):
        raise ProfileError(f"{where}: {not_absent} cannot be absent (only {', '.join(sorted(MAY_BE_ABSENT))})")
    power_cap_w = _power_cap_w(toml, where)
    readers: dict[str, Callable[[Traversable, str], Any]] = {
        "nccl": lambda file, src: _nccl(_fitted(file, src, "nccl"), src),
        "power": lambda file, src: _power(_fitted(file, src, "power"), power_cap_w, src),
        "sharing": lambda file, src: _sharing(_fitted(file, src, "sharing"), src),
        "host": lambda file, src: _fields_of(HostConstants, _fitted(file, src, "host"), src),
        "host_contention": lambda file, src: _fields_of(HostContention, _fitted(file, src, "host_contention"), src),
        "python_prices": lambda file, src: _fields_of(PythonPrices, _fitted(file, src, "python_prices"), src),
        "calibration": lambda file, src: Calibration.from_dict(_json(file, src)),
        "kernels": lambda file, src: _kernels(file, src, key),
        "gemm_kernels": lambda file, src: GemmKernelTable.from_dict(_json(file, src)),
        "chip_variation": lambda file, src: _fields_of(ChipVariation, _fitted(file, src, "chip_variation"), src),
    }
    empty: dict[str, Callable[[], Any]] = {
        "power": lambda: None, "kernels": lambda: KernelDatabase(key), "gemm_kernels": GemmKernelTable,
    }
    parts = {name: _part(root, key, name, borrow, absent, readers[name], empty.get(name)) for name in PART_FILES}
    if parts["power"].value is None and "power" not in absent:
        raise ProfileError(f"{where}: no power model: give power.json, [borrow] power or [absent] power")
    spec = _spec(key, toml, where)
    parts["sharing"] = _with_sm_count(parts["sharing"], spec, where)
    return DeviceProfile(key=key, spec=spec, node=_node(toml, where), absent=absent, **parts)


def _with_sm_count(sharing: Part[GpuSharing], spec: GpuSpec, where: str) -> Part[GpuSharing]:
    """The sharing model with this GPU's own SM count: the NCCL kernels' held SMs are a share of it."""
    try:
        value = dataclasses.replace(sharing.value, sm_count=spec.sm_count)
    except ValueError as error:
        raise ProfileError(f"{where}: {sharing.source}: {error}") from None
    return dataclasses.replace(sharing, value=value)


def _part(root: Traversable, key: str, name: str, borrow: Mapping[str, str], absent: Mapping[str, str],
          read: Callable[[Traversable, str], Any], empty: Callable[[], Any] | None) -> Part:
    """The part from the GPU's own file, else from the GPU `[borrow]` names, else absent."""
    own = root.joinpath(key, PART_FILES[name])
    if own.is_file():
        src = f"specs/{key}/{PART_FILES[name]}"
        return Part(value=read(own, src), source=src, borrowed_fields=_borrowed_fields(own, src))
    if name in borrow:
        lender = gpu_key(str(borrow[name]), root)
        file = root.joinpath(lender, PART_FILES[name])
        src = f"specs/{lender}/{PART_FILES[name]}"
        if lender == key or not file.is_file():
            raise ProfileError(f"specs/{key}/profile.toml: [borrow] {name} = {lender!r}, but {src} does not exist")
        return Part(value=read(file, src), source=src, borrowed_from=lender)
    if name in absent and empty is not None:
        return Part(value=empty(), source=str(absent[name]))
    raise ProfileError(f"specs/{key}: no {PART_FILES[name]}, and profile.toml neither borrows nor marks absent "
                       f"'{name}'")


_BORROWED = re.compile(r"borrowed from (\w+)")


def _borrowed_fields(file: Traversable, where: str) -> dict[str, str]:
    """Field -> lender for the fields of a fitted file whose source says "borrowed from <gpu>" (a fit that took one
    constant from another GPU's measurements, e.g. the H100's NCCL per-step latency)."""
    if not file.name.endswith(".json"):
        return {}
    sources = _json(file, where).get("sources")
    if not isinstance(sources, Mapping):
        return {}
    return {name: found.group(1) for name, source in sources.items()
            if isinstance(source, str) and (found := _BORROWED.search(source))}


# --- profile.toml ---------------------------------------------------------------------------------------
def _table(toml: Mapping[str, Any], name: str, where: str) -> dict[str, Any]:
    table = toml.get(name)
    if not isinstance(table, Mapping):
        raise ProfileError(f"{where}: missing [{name}] table")
    return dict(table)


def _spec(key: str, toml: Mapping[str, Any], where: str) -> GpuSpec:
    entry = _table(toml, "spec", where)
    entry["compute_capability"] = tuple(entry.get("compute_capability", ()))
    try:
        return GpuSpec(key=key, **entry)
    except TypeError as error:
        raise ProfileError(f"{where}: [spec]: {error}") from None


def _node(toml: Mapping[str, Any], where: str) -> NodeDefaults:
    node = _table(toml, "node", where)
    try:
        return NodeDefaults(gpus_per_node=int(node["gpus_per_node"]),
                            nvlink_bandwidth_bytes_per_s=float(node["nvlink_gbytes_per_s"]) * _GB,
                            nic_bandwidth_bytes_per_s=float(node["nic_gbits_per_s"]) * _GBIT,
                            sources=dict(node.get("sources", {})))
    except KeyError as error:
        raise ProfileError(f"{where}: [node] lacks {error}") from None


def _power_cap_w(toml: Mapping[str, Any], where: str) -> float | None:
    power = toml.get("power", {})
    return None if "cap_w" not in power else float(power["cap_w"])


# --- data files ---------------------------------------------------------------------------------------
def _json(file: Traversable, where: str) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ProfileError(f"{where}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: expected a JSON object")
    return data


def _fitted(file: Traversable, where: str, model: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(constants, sources) of a fitted file of `model`, checked for shape."""
    data = _json(file, where)
    if data.get("model") != model:
        raise ProfileError(f"{where}: a {model!r} file must say \"model\": \"{model}\", got {data.get('model')!r}")
    constants, sources = data.get("constants"), data.get("sources")
    if not isinstance(constants, dict) or not isinstance(sources, dict):
        raise ProfileError(f"{where}: needs \"constants\" and \"sources\" objects")
    if unsourced := sorted(set(constants) - set(sources)):
        raise ProfileError(f"{where}: constants without a source: {unsourced}")
    return constants, sources


def _construct(cls: type[T], where: str, **values: Any) -> T:
    """`cls(**values)`, every mistake (unknown or missing field, bad value) reported against the file."""
    names = {f.name for f in dataclasses.fields(cls)}
    if unknown := sorted(set(values) - names):
        raise ProfileError(f"{where}: unknown field(s) {unknown} for {cls.__name__}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise ProfileError(f"{where}: {error}") from None


def _fields_of(cls: type[T], fitted: tuple[dict[str, Any], dict[str, str]], where: str) -> T:
    """A dataclass whose fitted file's constants are its fields as they are (host, host contention)."""
    constants, _ = fitted
    return _construct(cls, where, **constants)


def _power(fitted: tuple[dict[str, Any], dict[str, str]], cap_w: float | None, where: str) -> PowerCap:
    constants, _ = fitted
    if cap_w is None:
        raise ProfileError(f"{where}: the GPU's profile.toml gives no [power] cap_w for these energies")
    return _construct(PowerCap, where, cap_w=cap_w, **constants)


def _sharing(fitted: tuple[dict[str, Any], dict[str, str]], where: str) -> GpuSharing:
    constants, _ = fitted
    values = dict(constants)
    try:
        values["by_op"] = tuple((op, float(f["compute_slowdown"]), float(f["nccl_slowdown"]))
                                for op, f in dict(values.get("by_op", {})).items())
    except (KeyError, TypeError, AttributeError) as error:
        raise ProfileError(f"{where}: by_op must map an operation to its compute_slowdown and nccl_slowdown "
                           f"({error})") from None
    return _construct(GpuSharing, where, **values)


def _nccl(fitted: tuple[dict[str, Any], dict[str, str]], where: str) -> NcclTuning:
    constants, sources = fitted
    values: dict[str, Any] = {}
    for name, value in constants.items():
        if isinstance(value, Mapping):
            try:
                value = PerProtocol(**value)
            except TypeError as error:
                raise ProfileError(f"{where}: {name}: {error}") from None
        values[name] = value
    return _construct(NcclTuning, where, **values, sources={**NCCL_TABLE_SOURCES, **sources})


def _kernels(file: Traversable, where: str, key: str) -> KernelDatabase:
    """A kernel database read as this GPU's (a borrowed one answers for the borrowing GPU)."""
    try:
        db = KernelDatabase.parse(file.read_text().splitlines(), where)
    except (ValueError, KeyError) as error:
        raise ProfileError(f"{where}: {error}") from None
    return db if db.gpu == key else KernelDatabase(key, db.entries, db.meta)
