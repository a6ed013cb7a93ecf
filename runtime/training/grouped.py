"""Grouped steps: one global batch trained by groups of ranks of a 2-D device mesh, each group under its own
per-layer plans, the model states in one layout over the whole world (docs/grouped_steps.md).

Library module (no command). The step is a `paradyse_lab.core.step_groups.GroupedStep`: aligned power-of-two
blocks of ranks, each training its items one after another, each item with its own `Plan` at the group's size.

Layout. The world model is `ParallelGPT` over all W ranks: rank r keeps row block r of W of every sub-layer
matrix (per row section, `weight_shards`), the norms, output biases, embeddings and head replicated; the optimizer
steps these tensors and checkpoints save them. A group of g ranks is the "sp" dimension of the (W/g x g)
mesh `("dp", "sp")`; `StepMeshes` makes one mesh per power of two g dividing W, once, on every rank.

Per step, with g_min the smallest group size and d = W / g_min (`step_gather`):
- gather: one all-gather of the flat world shards over the "dp" dimension of the g_min mesh (d ranks, holding
  the world blocks r % g_min + k g_min, k < d); a rank of a group of g keeps the W/g of them that are blocks
  r % g + k' g (g_min divides g) and joins them per row section into its group shard [n/g, ..]. The group's
  shard j thus holds world blocks j, j + g, j + 2g, ...: the group runs the model with its heads (and MLP
  columns) permuted by whole world blocks, the same function when every block is whole heads (heads and
  kv_heads divisible by W; g = 1 and g = W permute nothing). Otherwise a step with a group strictly between 1
  and W gathers over the whole world (the g = 1 mesh) and keeps the contiguous row block rank % g of g
  (`step_gather`): no permutation, at the price of the world-wide gather;
- compute: each item's forward and backward on the group's view of the model (`ParallelGPT` over the group,
  `rank_state_dict`: the gathered shards, the world's replicated tensors aliased), the strategies as today;
  an item's loss weighed by its share of the global batch's next-token targets;
- reduce (in fp32 for 16-bit weights, grad_reduce.GRAD_REDUCE_DTYPE; rounded once to the weights' dtype after):
  the view's gradients cut back into world blocks, placed in a [d, F] buffer (zeros where this rank's
  group shard does not hold the block) and reduce-scattered over the same "dp" group: every group contributes
  each block exactly once (an idle group zeros). The replicated gradients (already summed within each group)
  are all-reduced over "dp" with only each group's first g_min ranks contributing, and so is the step's loss.
A change of group sizes between steps moves no states: the world shards stay where they are, and every step
gathers and reduces the same way whatever the previous step was. The bytes are those the cost
model counts (`grouped_states`; checked byte for byte in tests/runtime/grouped_cases.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.core.strategies import CATALOG
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import grad_reduce
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.comm.group_timeout import new_subgroups
from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT
from paradyse_lab.runtime.model.weight_shards import SHARDED, join_row_blocks, row_sections
from paradyse_lab.runtime.strategies.ulysses_ring import make_block_subgroups

STATES_TAG = "states"
"""`comm_record.tagged` label of the grouped step's state collectives (gather, reduce-scatter, all-reduce)."""


_SHARED: dict = {}
"""`StepMeshes.shared`'s one slot: the key (device type, default process group) and its meshes."""


def forget_shared_meshes() -> None:
    """Drop `StepMeshes.shared`'s meshes and its reference to the default process group: called before the
    group is destroyed (`leave_process_group`), so that nothing keeps the world's gloo group
    and its threads alive after it."""
    _SHARED.clear()


def _step_mesh(device_type: str, world: int, g: int) -> DeviceMesh:
    """The (world/g x g) mesh ("dp", "sp") of `init_device_mesh`, its groups made with the run's collective
    timeout (`init_device_mesh` takes none and gives its groups torch's default) and joined by
    `DeviceMesh.from_group`. Every rank calls it (it makes every group of both dimensions)."""
    layout = torch.arange(world).view(world // g, g)  # [dp, sp]: rank dp * g + sp
    dp = new_subgroups([col.tolist() for col in layout.t()])  # ranks r % g + k g, k < world / g
    sp = new_subgroups([row.tolist() for row in layout])  # ranks of one block of g
    return DeviceMesh.from_group([dp, sp], device_type, mesh=layout, mesh_dim_names=("dp", "sp"))


class StepMeshes:
    """One `DeviceMesh` (W/g x g, dims ("dp", "sp")) per power of two g dividing the world size W, made at
    once on every rank (making a mesh is a collective). Without an initialised process group: one rank, no
    meshes, every group None (comm.py short-circuits)."""

    def __init__(self, device_type: str = "cpu"):
        self.world = comm.size(None)
        self.meshes = {}
        if not (dist.is_available() and dist.is_initialized()):
            self.sizes = (1,)
            return
        self.sizes = tuple(g for g in (2**i for i in range(self.world.bit_length())) if self.world % g == 0)
        for g in self.sizes:
            self.meshes[g] = _step_mesh(device_type, self.world, g)

    @classmethod
    def shared(cls, device_type: str = "cpu") -> StepMeshes:
        """The meshes of this process's world, made once per world (a process that trains several times, as
        validate-run and calibrate do, would otherwise make every mesh again: a collective opening new
        connections each time). Every rank of the world asks in the same order, so all make them together."""
        world = dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
        key = (device_type, world)
        if _SHARED.get("key") != key:
            _SHARED.update(key=key, meshes=cls(device_type))
        return _SHARED["meshes"]

    def group(self, size: int, dim: str):
        """The process group of this rank along `dim` ("dp" or "sp") of the mesh of groups of `size` ranks."""
        if size not in self.sizes:
            raise UserInputError(f"group size {size} must be a power of two dividing the world size {self.world}; "
                                 f"allowed: {', '.join(map(str, self.sizes))}")
        if not self.meshes or (self.world // size if dim == "dp" else size) == self.world:
            return None  # the dimension spans the world: the default group, whose connections are warm
        return self.meshes[size].get_group(dim)


def check_grouped_step(cfg, step: GroupedStep, meshes: StepMeshes) -> None:
    """Raise `UserInputError` unless this world can run `step` on `cfg`'s model."""
    if step.world != meshes.world:
        raise UserInputError(f"the step's groups cover {step.world} ranks, the world has {meshes.world}")
    for size in sorted(set(step.sizes)):
        meshes.group(size, "sp")  # refuses a size without a mesh


def make_step_subgroups(steps: Sequence[GroupedStep], world: int) -> None:
    """Make, on every rank at once, the head and ring groups of every two-dimensional strategy (`head_degree`
    a) that a group of `steps` smaller than the world runs (`ulysses_ring.make_block_subgroups`, in one order
    on every rank: each rank reads every group's plans). Made by a group's members alone, their names would
    count the groups each member made before, which differ between ranks that trained in different groups.
    Every rank calls it before the steps' compute."""
    wanted = {(group.size, CATALOG[opt.strategy].head_degree)
              for step in steps for group in step.groups if 1 < group.size < world
              for plan in group.plans for opt in plan.options if CATALOG[opt.strategy].head_degree}
    for size, a in sorted(wanted):
        make_block_subgroups(size, a)


def step_gather(cfg, sizes, world: int) -> tuple[int, bool]:
    """(g, contiguous): the mesh whose "dp" dimension a step of groups of `sizes` gathers over (groups of g), and
    whether the group shards are contiguous row blocks (gathered from the whole world, g = 1) rather than
    interleaved world blocks. Interleaved is the same function only when every rank's 1/W block of every matrix
    is whole heads (heads and kv_heads divisible by W); otherwise a step with a group strictly between 1 and W
    gathers over the world (`data_parallel_width`)."""
    whole_heads = cfg.heads % world == 0 and cfg.kv_heads % world == 0
    if whole_heads or all(g in (1, world) for g in sizes):
        return min(sizes), False
    return 1, True


def _sharded_names(model) -> list[str]:
    """The world model's sharded tensors (sub-layer w1, b1, w2), in parameter order."""
    return [n for n, _ in model.named_parameters() if n.startswith("layers.") and n.rpartition(".")[2] in SHARDED]


def _group_sections(model, name: str, size: int) -> tuple[int, ...]:
    """Row sections of tensor `name` in a group shard of `size` ranks (w2: one section)."""
    prefix, _, leaf = name.rpartition(".")
    sub = model.get_submodule(prefix)
    n1, n2 = sub.w1.shape[0] * model.p, sub.w2.shape[0] * model.p  # the full matrices' rows
    if leaf == "w2":
        return (n2 // size,)
    return tuple(n // size for n in row_sections("attention" if prefix.endswith(".attn") else "mlp", n1, n2))


def _kept_rows(rank: int, size: int, g_min: int, world: int, contiguous: bool = False) -> list[int]:
    """The rows k of the "dp" gather of the g_min mesh (row k: world block rank % g_min + k g_min) that belong to
    the group shard of a rank in a group of `size`: world blocks rank % size + k' size, increasing; `contiguous`
    (g_min = 1, row k is world block k): the blocks of row block rank % size of `size`, in order."""
    if contiguous:
        j, per = rank % size, world // size
        return list(range(j * per, (j + 1) * per))
    return [k for k in range(world // g_min) if (rank % g_min + k * g_min) % size == rank % size]


def gather_group_shards(model, size: int, g_min: int, dp, contiguous: bool = False) -> dict[str, torch.Tensor]:
    """This rank's shard at group size `size` of every sharded tensor, from the world shards (one all-gather
    over `dp`, the "dp" group of the g_min mesh; `step_gather` gives g_min and `contiguous`): name -> [n/size, ..]."""
    params = dict(model.named_parameters())
    names = _sharded_names(model)
    if size == model.p:  # one group of the whole world: its shards are the world's (aliased, nothing gathered)
        return {n: params[n].detach() for n in names}
    flat = torch.cat([params[n].detach().reshape(-1) for n in names])  # [F]: this rank's world shards
    with comm_record.tagged(STATES_TAG):
        rows = comm.all_gather(flat, dp).view(-1, flat.numel())  # [F] -> [d*F] -> [d, F]
    del flat
    kept = _row_index(model.rank, size, g_min, model.p, contiguous)
    out, offset = {}, 0
    for n in names:
        q = params[n]
        blocks = rows[kept, offset:offset + q.numel()]  # [d, F] -> [W/size, F_n]
        blocks = blocks.reshape(model.p // size, *q.shape)  # [W/size, F_n] -> [W/size, n/W, ..]
        out[n] = join_row_blocks(list(blocks), _group_sections(model, n, size))  # -> [n/size, ..]
        offset += q.numel()
    return out


def _row_index(rank: int, size: int, g_min: int, world: int, contiguous: bool = False):
    """`_kept_rows` as an index of the [d, F] buffer: a slice (a view) when every row is kept (size = g_min)."""
    kept = _kept_rows(rank, size, g_min, world, contiguous)
    return slice(None) if len(kept) == world // g_min else kept


def group_view(model, size: int, g_min: int, dp, sp, contiguous: bool = False):
    """The model over this rank's group (`sp`, `size` ranks): its gathered shards and the world model's
    replicated tensors (aliased, not copied), each a fresh leaf whose gradient the group's backward fills."""
    local = {n: q.detach() for n, q in model.named_parameters()}
    local.update(gather_group_shards(model, size, g_min, dp, contiguous))
    return ParallelGPT(model.cfg, sp, rank_state_dict=local)


def _set_grad(q: torch.Tensor, grad: torch.Tensor) -> None:
    """q's gradient from `grad` (flat [numel], a view of the phase's buffer): the view itself when q has none (no
    copy: the buffer becomes the world's gradients), else added in place."""
    grad = grad.view_as(q)  # [numel] -> q's shape
    if q.grad is None:
        q.grad = grad
    else:
        q.grad.add_(grad)


def _add_row_block(dst: torch.Tensor, x: torch.Tensor, sections: tuple[int, ...], k: int, parts: int) -> None:
    """Row block k of `parts` of each section of x added into dst (weight_shards.row_block's rows, [n/parts, ..]),
    section by section: nothing allocated (an empty tensor, a model without biases' b1: nothing to add)."""
    if x.numel() == 0:
        return
    start = 0
    for part in x.split(list(sections)):
        rows = len(part) // parts
        dst[start:start + rows].add_(part[k * rows:(k + 1) * rows])  # [n_s/parts, ..]
        start += rows


def scatter_group_grads(model, view, size: int, g_min: int, dp, contiguous: bool = False) -> None:
    """Sum the view's sharded gradients over the groups onto the world shards' `.grad` (one reduce-scatter
    over `dp`, in fp32 buckets for 16-bit weights: grad_reduce.reduce_scatter_grads; the blocks this rank's group shard
    does not hold are zeros). Allocates the [d, F] buffer and the reduce-scatter's [F] output, which becomes the
    world shards' gradients (views of it), and the fp32 buckets
    (`reduce_phase_bytes`)."""
    params, vparams = dict(model.named_parameters()), dict(view.named_parameters())
    names = _sharded_names(model)
    if size == model.p:  # one group of the whole world: its gradients are already the world shards'
        for n in names:
            if vparams[n].grad is not None:
                _set_grad(params[n], vparams[n].grad.reshape(-1))
        return
    buf = vparams[names[0]].new_zeros(model.p // g_min, sum(params[n].numel() for n in names))  # [d, F]
    place_group_grads(model, view, size, g_min, buf, contiguous)
    reduce_scattered_grads(model, buf, dp)


def state_numels(model) -> tuple[int, int]:
    """(F, R): this rank's elements of the world shards of the sharded tensors, and of the replicated tensors."""
    sharded = set(_sharded_names(model))
    counts = [0, 0]
    for n, q in model.named_parameters():
        counts[n not in sharded] += q.numel()
    return counts[0], counts[1]


def place_group_grads(model, view, size: int, g_min: int, buf: torch.Tensor, contiguous: bool = False) -> None:
    """Add the view's sharded gradients (a group of `size`) into the [d, F] buffer `buf` of the g_min mesh's "dp"
    gather: each block of the group shard at the row of its world block (`_kept_rows`); a tensor without a
    gradient adds nothing."""
    params, vparams = dict(model.named_parameters()), dict(view.named_parameters())
    parts = model.p // size
    kept, offset = _kept_rows(model.rank, size, g_min, model.p, contiguous), 0
    for n in _sharded_names(model):
        g = vparams[n].grad  # [n/size, ..]; None: no gradient, its rows unchanged
        numel = params[n].numel()
        if g is not None:
            sections = _group_sections(model, n, size)
            for k, row in enumerate(kept):  # block k of the group shard is world block row of the gather
                _add_row_block(buf[row, offset:offset + numel].view(params[n].shape), g, sections, k, parts)
        offset += numel


def reduce_scattered_grads(model, buf: torch.Tensor, dp) -> None:
    """The [d, F] buffer `buf` reduce-scattered over `dp` (fp32 buckets for 16-bit, grad_reduce.reduce_scatter_grads)
    onto the world shards' `.grad`: its [F] output (rounded once to the weights' dtype when `buf` is wider) becomes
    their gradients (views of it)."""
    params = dict(model.named_parameters())
    names = _sharded_names(model)
    with comm_record.tagged(STATES_TAG):
        shard = grad_reduce.reduce_scatter_grads(buf.reshape(-1), dp)  # [d*F] -> [F], summed over the groups in fp32
    del buf
    shard = shard.to(params[names[0]].dtype)  # [F]: rounded once (no copy when the dtypes agree)
    for n, piece in zip(names, shard.split([params[n].numel() for n in names])):
        _set_grad(params[n], piece)


def reduce_replicated_grads(model, view, contributes: bool, dp) -> None:
    """Sum the replicated tensors' gradients over the groups (one all-reduce over `dp`; a group's gradients are
    already summed over its ranks, so only `contributes` ranks, one per group in each "dp" group, add theirs).
    Allocates one [R] buffer, which becomes the world's replicated gradients (views of it), summed in fp32 buckets
    for 16-bit weights (grad_reduce.all_reduce_flat_grads_); nothing with one group of the whole world (no "dp"
    peers: the view's gradients become the world's)."""
    pairs = _replicated_pairs(model, view)
    if comm.size(dp) == 1:  # one group of the whole world: its replicated gradients are already the world's
        for q, v in pairs:
            _set_grad(q, v.grad.reshape(-1) if v.grad is not None else v.new_zeros(v.numel()))
        return
    flat = pairs[0][1].new_zeros(sum(v.numel() for _, v in pairs))  # [R]
    if contributes:
        add_replicated_grads(model, view, flat)
    all_reduce_replicated(model, flat, dp)


def _replicated_pairs(model, view) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(world tensor, the view's) of every replicated tensor, in parameter order."""
    sharded, vparams = set(_sharded_names(model)), dict(view.named_parameters())
    return [(q, vparams[n]) for n, q in model.named_parameters() if n not in sharded]


def add_replicated_grads(model, view, flat: torch.Tensor) -> None:
    """Add the view's replicated gradients into the flat [R] buffer `flat` (parameter order)."""
    pairs = _replicated_pairs(model, view)
    for piece, (_, v) in zip(flat.split([v.numel() for _, v in pairs]), pairs):
        if v.grad is not None:
            piece.add_(v.grad.reshape(-1))  # each [..] -> its slice of [R]


def all_reduce_replicated(model, flat: torch.Tensor, dp) -> None:
    """The [R] buffer `flat` summed over `dp` in place (fp32 buckets for 16-bit) onto the world's replicated
    tensors' `.grad`: their gradients are views of it (of its copy rounded once to their dtype when it is wider)."""
    sharded = set(_sharded_names(model))
    world = [q for n, q in model.named_parameters() if n not in sharded]
    with comm_record.tagged(STATES_TAG):
        grad_reduce.all_reduce_flat_grads_(flat, dp)  # [R] summed over the groups in place (fp32 buckets)
    flat = flat.to(world[0].dtype)  # [R]: rounded once (no copy when the dtypes agree)
    for q, piece in zip(world, flat.split([q.numel() for q in world])):
        _set_grad(q, piece)


def reduce_step_grads(model, view, size: int, g_min: int, dp, contiguous: bool, contributes: bool) -> None:
    """The step's reduce phase, after the backward (its activations freed): the view's gradients summed over the
    groups onto the world model's `.grad` (`scatter_group_grads`, `reduce_replicated_grads`). The bytes it
    allocates are `reduce_phase_bytes`."""
    scatter_group_grads(model, view, size, g_min, dp, contiguous)
    reduce_replicated_grads(model, view, contributes, dp)


def grouped_step(model, step: GroupedStep, meshes: StepMeshes, load_item: Callable, targets: Sequence[int],
                 loss_tiles: Sequence[int] = ()) -> float:
    """Forward and backward of the global batch of `step` on the world model `model` (every rank calls it):
    this rank's group trains its items, `load_item(i, sp_group)` giving item i's (ids, labels, cu_seqlens) as
    this rank's shard at the group's size; `targets[i]` item i's next-token targets; `loss_tiles[i]` > 0: item i
    with the tiled loss of that many tokens a tile (none given: the whole head). The world
    shards' `.grad` get the gradient of the mean loss over every target of the batch; returns that loss (on every
    rank)."""
    check_grouped_step(model.cfg, step, meshes)
    make_step_subgroups([step], model.p)
    rank = model.rank
    group = step.group_of(rank)
    g_min, contiguous = step_gather(model.cfg, step.sizes, model.p)
    dp, sp = meshes.group(g_min, "dp"), meshes.group(group.size, "sp")
    view = group_view(model, group.size, g_min, dp, sp, contiguous)
    loss_sum = train_group_items(view, group, sp, load_item, targets, loss_tiles)
    contributes = rank - group.start < g_min
    reduce_step_grads(model, view, group.size, g_min, dp, contiguous, contributes)
    with comm_record.tagged(STATES_TAG):
        step_loss = comm.all_reduce(loss_sum if contributes else torch.zeros_like(loss_sum), dp)  # [1] summed
    return float(step_loss[0])


def train_group_items(view, group: StepGroup, sp, load_item: Callable, targets: Sequence[int],
                      loss_tiles: Sequence[int] = (), step_items: Sequence[int] | None = None) -> torch.Tensor:
    """Forward and backward of `group`'s items one after another on `view` (its model over `sp`), each mean loss
    weighed by its share of the step's targets (`targets`, by the step's item); `step_items[j]`: the step's index
    of the group's item j (None: the same). Returns the weighed losses summed (fp32 [1])."""
    total = max(1, sum(targets))
    loss_sum = torch.zeros(1, dtype=torch.float32, device=view.wte.device)  # [1]
    for local, plan in zip(group.items, group.plans):
        item = local if step_items is None else step_items[local]
        ids, labels, cu_seqlens = load_item(item, sp)
        tile = loss_tiles[item] if loss_tiles else 0
        loss = view(ids, plan, labels, cu_seqlens=cu_seqlens, loss_tile=tile)[1]  # the logits dropped at once
        weight = targets[item] / total
        (loss * weight).backward()
        loss_sum += loss.detach().float() * weight
    return loss_sum
