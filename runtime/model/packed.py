"""Packed sequences: several documents in one training sequence, attention confined to each document.

Library module (no command; `paradyse-lab train --pack-tokens N` packs its steps with it).

A pack is the documents of one step, each padded to the layout unit (2p, 1 at p = 1:
`paradyse_lab.core.strategies.layout_unit`, the unit every strategy reads) by padding tokens that form a
segment of their own right after it (they attend only to each other and carry no loss), concatenated. The
zig-zag layout is applied per document (`local_positions`): every padded document is cut
into 2p chunks and rank r holds chunks r and 2p-1-r of each, as Megatron-LM's THD layout and
ring-flash-attention's varlen zig-zag do. Every rank holds the same t = s/p tokens (the linear parts are
even) and the same share of every document's causal triangle, so ring attention is balanced but for the
padding's few pairs (`rank_attention_pairs`, which the cost model charges);
the price is padding every document (a single-token document costs 2p tokens). megatron_ts and ulysses_z
attend over the whole pack in natural order per head shard, and ring blocks over their segments, with the
varlen kernels (flash-attn's or PyTorch's flash kernel with cumulative lengths on CUDA,
the exact kernel once per segment on CPU): no [s, s] buffer, no mask.

The varlen form is `cu_seqlens` [n + 1]: the cumulative segment offsets in the pack (each document, then
its padding when it has any), the argument FlashAttention's `flash_attn_varlen_func` takes
(flash-attn docs: "cu_seqlens_q: (batch_size + 1,), dtype torch.int32. The cumulative sequence lengths of
the sequences in the batch"). Every rank derives any token's document and in-document position from it
locally (`document_of`), so ring attention needs no extra message for the blocks of the K/V it receives.
Query i sees key j iff they are in the same document and (non-causal, or pos_j <= pos_i), pos being the
position within the document (`document_mask`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.costmodel.packed import PackedStep
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.model.layout import gathered_positions, local_positions
from paradyse_lab.workload.zigzag_balance import rank_attention_pairs as pairs_of_segments

IGNORE = -100
"""Label of positions the loss skips (torch.nn.functional.cross_entropy's ignore_index)."""


def pack_sequence(lengths: Sequence[int], p: int) -> PackedStep:
    """The pack of documents of `lengths` tokens for p ranks: a `PackedStep` (the one type of a packed step,
    the cost model's too), each document padded to `layout_unit(p)`."""
    lengths = tuple(int(n) for n in lengths)
    if not lengths or any(isinstance(n, bool) or n <= 0 for n in lengths):
        raise UserInputError(f"a pack needs one or more documents of positive length, got {list(lengths)}")
    return PackedStep(lengths, layout_unit(p))


def cu_seqlens(pack: PackedStep) -> torch.Tensor:
    """[n + 1] int32 cumulative offsets of the pack's attention segments (`pack.segments`: each document, then
    its padding when it has any)."""
    return torch.tensor([0, *pack.segments], dtype=torch.int64).cumsum(0).to(torch.int32)


def _document_starts(pack: PackedStep) -> list[int]:
    """Offset of each document in the pack (each earlier document and its padding before it)."""
    return torch.tensor([0, *(n + pad for n, pad in zip(pack.documents, pack.paddings))]).cumsum(0).tolist()


def pack_labels(pack: PackedStep, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token targets [b, s] of pack tokens [b, s]: -100 at every document's last token (its successor
    belongs to the next document) and on the padding."""
    labels = torch.full_like(tokens, IGNORE)
    for start, n in zip(_document_starts(pack), pack.documents):
        labels[:, start:start + n - 1] = tokens[:, start + 1:start + n]
    return labels


def documents_of(pack: PackedStep, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Each real document's tokens [b, n_i] of pack tokens [b, s] (padding left out)."""
    return [tokens[:, a:a + n] for a, n in zip(_document_starts(pack), pack.documents)]


def check_cu_seqlens(cu_seqlens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """`cu_seqlens` as an int64 CPU tensor, after checking that it starts at 0, increases strictly and ends
    at `seq_len` (`UserInputError` otherwise)."""
    cu = torch.as_tensor(cu_seqlens).to("cpu", torch.int64).reshape(-1)
    if cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != seq_len or not bool((cu[1:] > cu[:-1]).all()):
        raise UserInputError(f"cu_seqlens {cu.tolist()} must start at 0, increase strictly and end at the "
                             f"sequence length {seq_len}")
    return cu


def document_of(cu_seqlens: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(document id, position within the document) of the pack positions `index` [n]: two [n] int64."""
    cu = cu_seqlens.to(index.device, torch.int64)
    doc = torch.searchsorted(cu, index, right=True) - 1  # [n]: the last offset <= index
    return doc, index - cu[doc]


def local_documents(cu_seqlens: torch.Tensor, seq_len: int, p: int, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(doc_ids, positions) [t] of rank r's tokens in the zig-zag layout of a pack of `seq_len` tokens."""
    return document_of(cu_seqlens, local_positions(seq_len, p, r, cu_seqlens).to(cu_seqlens.device))


def pack_positions(cu_seqlens: torch.Tensor, seq_len: int, p: int, r: int):
    """(doc_ids [t], positions [t], all_positions [s]) of a pack in the zig-zag layout: rank r's tokens' documents
    and positions within them, and every rank's positions within their documents, rank-major."""
    doc_ids, positions = local_documents(cu_seqlens, seq_len, p, r)
    return doc_ids, positions, document_of(cu_seqlens, gathered_positions(seq_len, p, cu_seqlens))[1]


def document_mask(q_doc: torch.Tensor, q_pos: torch.Tensor, k_doc: torch.Tensor, k_pos: torch.Tensor,
                  causal: bool) -> torch.Tensor:
    """[sq, sk] bool, True where query i may see key j: same document and (non-causal or pos_j <= pos_i)."""
    allowed = q_doc.unsqueeze(1) == k_doc.unsqueeze(0)  # [sq, 1] == [1, sk] -> [sq, sk]
    if causal:
        allowed &= k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)
    return allowed


def block_diagonal_mask(cu_seqlens: torch.Tensor, causal: bool) -> torch.Tensor:
    """[s, s] bool mask of the whole pack in natural order (the single-device reference's)."""
    index = torch.arange(int(cu_seqlens[-1]), device=cu_seqlens.device)
    doc, pos = document_of(cu_seqlens, index)
    return document_mask(doc, pos, doc, pos, causal)


def rank_attention_pairs(pack: PackedStep, p: int, causal: bool) -> list[int]:
    """(query, key) pairs each rank's queries attend to under the per-document zig-zag layout: a token at
    position pos of a segment of n tokens sees pos + 1 keys (causal) or n (non-causal). The count is the cost
    model's (`paradyse_lab.workload.zigzag_balance`, which charges ring strategies the busiest rank's)."""
    return pairs_of_segments(pack.segments, p, causal)
