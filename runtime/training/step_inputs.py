"""What each training step trains: its length, what the policy plans for it, and its tokens and labels.

Library module of the training loop. `StepInputs.build(opts, p, cfg)` reads the workload of `--dataset` once
(and, for evaluation, `build(..., dataset=opts.eval_dataset)` the held-out one). Step i (a micro-step index:
optimizer step k with --accumulate A trains i = k*A .. k*A+A-1) then trains:

- with `--pack-tokens` (or a packed length file): pack i of `PackedSteps`, one
  sequence of its documents, each padded to the layout unit; the policy plans its documents
  (`paradyse_lab.costmodel.packed.PackedStep`, attention per document);
- with a `file:*.jsonl` of token ids, or a text dataset tokenized with --tokenizer:
  its own documents whole (`TokenDocuments`, in --data-order);
- otherwise: the workload's length i, padded up to the layout unit and capped
  (`paradyse_lab.core.strategies.step_length`, the rule `simulate` pads by), its tokens drawn from a fixed sparse
  Markov chain (seeded; each token has 4 likely successors: a model can learn it, so the loss falls) and the
  padding masked out of the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.core.strategies import layout_unit, step_length
from paradyse_lab.errors import UserInputError

IGNORE = -100
"""Label of positions the loss skips (torch.nn.functional.cross_entropy's ignore_index)."""


def markov_tokens(seed: int, step: int, b: int, s: int, vocab: int):
    """[b, s] token ids of this step from the seeded Markov chain (module docstring)."""
    import torch

    table = torch.randint(0, vocab, (vocab, 4), generator=torch.Generator().manual_seed(seed + 12345))
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    choice = torch.multinomial(torch.tensor([0.85, 0.05, 0.05, 0.05]), b * s, True, generator=gen)
    choice = choice.view(b, s).tolist()  # [b*s] -> [b, s], as host ints
    first = torch.randint(0, vocab, (b,), generator=gen).tolist()
    rows, successors = [], table.numpy()  # the chain is sequential: walk it on the host, not per-token tensor ops
    for row, token in zip(choice, first):
        walk = [token]
        for c in row[1:]:
            walk.append(int(successors[walk[-1], c]))
        rows.append(walk)
    return torch.tensor(rows, dtype=torch.long)  # [b, s]


def chunks_documents(opts) -> bool:
    """Whether --long-documents can change this run's steps: only documents are chunked or cut (a token file, a
    text dataset, or a workload packed by --pack-tokens); one sampled sequence per step is only capped."""
    token_file = opts.dataset.startswith("file:") and opts.dataset.endswith(".jsonl")
    return bool(opts.tokenizer) or token_file or opts.pack_tokens is not None


@dataclass
class StepInputs:
    """The steps of one run (module docstring)."""

    opts: object
    """The run's settings (the fields of `paradyse_lab.app.train_options.TrainOptions`)."""
    lengths: list[int]
    """The workload's lengths, in training order."""
    unit: int
    """The layout unit at this world size (`layout_unit(p)`)."""
    cap: int
    """The longest sequence the model takes (--max-len, else its positions)."""
    docs: object = None
    """`TokenDocuments` of a `file:*.jsonl` dataset, else None."""
    packs: object = None
    """`PackedSteps` with --pack-tokens or a packed length file, else None."""
    seed_offset: int = 0
    """Added to the step index of the synthetic tokens (evaluation draws other sequences than training)."""
    eval_steps: int = 0
    """Held-out steps one evaluation averages over (`held_out`; 0 for the training steps)."""
    long_documents: object = None
    """What was done with the documents longer than the cap (`paradyse_lab.workload.long_documents.LongDocuments`): the
    documents of a token or text file, or the workload's lengths when packed; None for one synthetic sequence
    per step (its length is cut, no real token lost)."""

    @classmethod
    def build(cls, opts, p: int, cfg, size: int | None = None, *, dataset: str | None = None,
              seed_offset: int = 0) -> StepInputs:
        """The steps of `dataset` (default --dataset) on p ranks for a model of config `cfg`
        (`paradyse_lab.runtime.model.reference.GPTConfig`), the workload sampled with `size` sequences (default
        --steps; a resumed
        run passes its checkpoint's)."""
        from paradyse_lab.runtime.training.run_inputs import PackedSteps, TokenDocuments
        from paradyse_lab.workload.lengths import get_workload
        from paradyse_lab.workload.long_documents import handle

        dataset = dataset or opts.dataset
        docs = TokenDocuments.from_options(opts, dataset, cfg.vocab_size)  # None unless a token file or a text dataset
        workload = get_workload(dataset, size=size or opts.steps, seed=opts.seed) if docs is None else None
        lengths = list(workload.lengths) if workload is not None else []
        limits = [n for n in (opts.max_len, cfg.max_positions) if n]  # rotary models may have no position limit
        cap = min(limits) if limits else 2**31
        packs, long = None, None
        limit = cap // layout_unit(p) * layout_unit(p)  # a step's length: the cap rounded down to the layout unit
        if limit and (docs is not None or opts.pack_tokens is not None):
            mode = getattr(opts, "long_documents", "chunk")
            if docs is not None:
                docs.docs, long = handle(docs.docs, limit, mode)
            else:
                lengths, long = handle(lengths, limit, mode)
        if opts.pack_tokens is not None:
            packs = PackedSteps.build(opts, lengths, docs, cap, p)
        elif workload is not None and workload.packs is not None:  # a packed length file: its own steps
            if opts.batch != 1:
                raise UserInputError(f"--batch must be 1 with a packed length file (a step is one pack), "
                                     f"got {opts.batch}")
            packs = PackedSteps.from_file_steps(workload.packs, cap, p)
        return cls(opts, lengths, layout_unit(p), cap, docs, packs, seed_offset, long_documents=long)

    @classmethod
    def held_out(cls, opts, p: int, cfg) -> StepInputs:
        """The held-out steps of --eval-dataset: its first --eval-batches steps, each a different one.

        A sampled workload (uniform, lognormal, the paper's) packed by --pack-tokens is sampled with as many
        documents as fill that many packs (twice as many until they do: every document has a token, so
        --eval-batches x --pack-tokens documents always do). A dataset of fixed documents (a file, a text
        dataset) with fewer steps than asked gives those it has (`distinct_steps`), each evaluated once;
        `eval_steps` says how many."""
        from paradyse_lab.workload.lengths import MAX_SIZE

        size, asked = opts.eval_batches, opts.eval_batches
        while True:
            inputs = cls.build(opts, p, cfg, size, dataset=opts.eval_dataset, seed_offset=10**9)
            have = inputs.distinct_steps()
            sampled = inputs.docs is None and not opts.eval_dataset.startswith("file:")
            if have is None or have >= asked or not sampled or size >= MAX_SIZE:
                break
            size = min(2 * size, MAX_SIZE)
        inputs.eval_steps = asked if have is None else min(have, asked)
        return inputs

    def distinct_steps(self) -> int | None:
        """Different steps the data gives before it repeats: its packs, or its documents in steps of --batch
        (the last one topped up from the first documents); None when every step draws its own synthetic tokens."""
        if self.packs is not None:
            return len(self.packs.packs)
        if self.docs is not None:
            return -(-len(self.docs.docs) // self.opts.batch)
        return None

    def length(self, step: int) -> int:
        """The sequence length step `step` trains (a multiple of the layout unit)."""
        if self.packs is not None:
            return self.packs.pack(step).padded_len
        if self.docs is not None:
            return self.docs.row_length(step, self.opts.batch, self.unit, self.cap)
        return step_length(self.lengths[step % len(self.lengths)], self.unit, self.cap)

    def planned(self, step: int):
        """What the policy plans: the step's length, or its pack's documents (a `PackedStep`, whose cost is
        per document), never the pack as one sequence of its padded length."""
        return self.packs.pack(step) if self.packs is not None else self.length(step)

    def targets(self, step: int) -> int:
        """Positions of step `step` whose next token the loss predicts (its padding and document ends have none)."""
        if self.packs is not None:
            return sum(n - 1 for n in self.packs.pack(step).documents)
        if self.docs is not None:
            return self.docs.row_targets(step, self.opts.batch, self.length(step))
        return self.opts.batch * (min(self.lengths[step % len(self.lengths)], self.length(step)) - 1)

    @property
    def period(self) -> int:
        """Steps before the data repeats."""
        if self.packs is not None:
            return len(self.packs.packs)
        return len(self.docs.docs) if self.docs is not None else len(self.lengths)

    def refuse_untrainable(self, steps: int | None = None) -> None:
        """`UserInputError` before the first step when one of the first `steps` steps (default --steps) has
        nothing to train on (`refuse_untrainable`)."""
        from paradyse_lab.runtime.training.run_inputs import refuse_untrainable

        refuse_untrainable(self.opts, 0, self.period, self.cap, self.unit, self.targets, steps)

    def documents(self, step: int) -> int:
        """Documents step `step` trains (the batch, or the pack's documents)."""
        return len(self.packs.pack(step).documents) if self.packs is not None else self.opts.batch

    def tokens(self, step: int) -> int:
        """Tokens step `step` trains on (padding left out): each document's targets and its last token."""
        return self.targets(step) + self.documents(step)

    def cut(self, step: int) -> int:
        """Tokens of step `step`'s documents it does not train: beyond --max-len or the model's positions (the
        cap), or beyond the cap rounded down to the layout unit 2p."""
        if self.packs is not None:
            return self.packs.cut_tokens(step)
        s = self.length(step)
        if self.docs is not None:
            return sum(max(0, len(r) - s) for r in self.docs.rows(step, self.opts.batch))
        return self.opts.batch * max(0, int(self.lengths[step % len(self.lengths)]) - s)

    def batch(self, step: int, vocab: int):
        """(tokens [b, s], next-token labels [b, s] with -100 where no loss is taken, cu_seqlens [n + 1] of a
        pack or None) of step `step`, on the CPU."""
        import torch

        from paradyse_lab.runtime.model.packed import cu_seqlens, pack_labels

        s, opts = self.length(step), self.opts
        if self.packs is not None:
            pack = self.packs.pack(step)
            tokens = (self.packs.token_batch(step, vocab) if self.docs is not None
                      else markov_tokens(opts.seed, step + self.seed_offset, 1, s, vocab))
            return tokens, pack_labels(pack, tokens), cu_seqlens(pack)  # labels -100 at document ends, padding
        if self.docs is not None:
            return (*self.docs.row_batch(step, opts.batch, s, vocab), None)
        tokens = markov_tokens(opts.seed, step + self.seed_offset, opts.batch, s, vocab)
        labels = torch.cat([tokens[:, 1:], torch.full((opts.batch, 1), IGNORE)], dim=1)  # next-token targets
        labels[:, min(self.lengths[step % len(self.lengths)], s) - 1:] = IGNORE  # the step's padding: no loss
        return tokens, labels, None
