"""What `paradyse_lab.runtime.training.loop` checks before it trains, and the token rows of a `file:*.jsonl` dataset.

Library module (the training loop calls it; `paradyse-lab train --help` lists the options):

- `check_options(opts)`: every number and path of the run's settings (finite positive lr, non-negative seed and
  --max-len, a writable --log-file, a --checkpoint-dir that is a folder), one `UserInputError` each;
  `check_log_file(opts)`: a new run does not write into an earlier run's --log-file; `check_log_owner(opts,
  meta)`: a resumed run rewrites only its own log (its row of the checkpoint's step as the checkpoint recorded it).
- `refuse_untrainable(...)`: a step with no next-token target (every document in it 1 token long, or
  --max-len below the layout unit) is refused before the first step, never trained as loss 0.0.
- `TokenDocuments`: the documents of a JSONL file of token-id lists, or of a text dataset tokenized with
  --tokenizer, in --data-order (default the file's order; `sorted`: ascending
  length, the paper's curriculum; `shuffled`: seeded). Step i trains documents
  i*b .. i*b+b-1 (mod the count), each whole: the step's length is the longest of them rounded up to the
  layout unit (documents longer than the cap are cut to it), shorter rows are padded and their padding
  (and each row's last position) is masked out of the loss with label -100.
- `PackedSteps` (`--pack-tokens N`): the workload's documents (each cut to the cap) packed first-fit into steps
  of at most N tokens (`pack_document_indices`); step i trains pack i (mod the
  count), each document padded to the layout unit; with a `file:*.jsonl` its tokens are the
  documents' own.
  Without `--pack-tokens`, a packed length file (several lengths per line) trains its own steps as they are
  (`from_file_steps`), as `simulate` does; with it, its documents are packed anew.
"""

from __future__ import annotations

from pathlib import Path

from paradyse_lab.errors import UserInputError, require_number, require_positive_int

LOG_COLUMNS = ("step", "seq_len", "docs", "tokens", "cut_tokens", "loss", "lr", "grad_norm", "eval_loss", "step_s",
               "peak_bytes", "peak_of", "plan", "solve_s", "cached", "feasible", "attention_kernel")
"""The columns of the per-step log (`--log-file`), in order."""
IGNORE = -100
"""Label of positions the loss skips (torch.nn.functional.cross_entropy's ignore_index)."""


def check_options(opts) -> None:
    """Numbers and paths of `opts` (the run's settings: the fields of paradyse_lab.app.train_options.TrainOptions);
    raises `UserInputError` naming the option."""
    require_positive_int("--steps", opts.steps, 10**9)
    require_positive_int("--batch", opts.batch, 2**20)
    require_number("--lr", opts.lr, 0.0, 1e3, low_open=True)
    require_number("--weight-decay", opts.weight_decay, 0.0, 1e3)
    require_number("--budget-gib", opts.budget_gib, 0.0, 1e9)
    from paradyse_lab.runtime.training.optim_schedule import check_optimisation_options

    check_optimisation_options(opts)
    for field, value in (("--seed", opts.seed), ("--max-len", opts.max_len),
                         ("--checkpoint-every", opts.checkpoint_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UserInputError(f"{field} must be an integer >= 0, got {value!r}")
    if opts.max_len == 1:
        raise UserInputError("--max-len must be 0 (the model's positions) or at least 2 (a step needs a token and "
                             "the next token it predicts), got 1")
    if opts.seed >= 2**32:
        raise UserInputError(f"--seed must be below 2**32, got {opts.seed}")
    from paradyse_lab.workload.packing import MAX_TOKEN_BUDGET, PACK_ORDERS

    if opts.pack_order not in PACK_ORDERS:
        raise UserInputError(f"--pack-order must be one of {', '.join(PACK_ORDERS)}, got {opts.pack_order!r}")
    if opts.pack_tokens is not None:  # not given: one sequence per step; given: positive, as simulate and workload
        require_positive_int("--pack-tokens", opts.pack_tokens, MAX_TOKEN_BUDGET)
    if opts.pack_tokens is not None and opts.batch != 1:
        raise UserInputError(f"--batch must be 1 with --pack-tokens (a step is one pack), got {opts.batch}")
    if opts.log_file:
        from paradyse_lab.files.atomic_write import check_output_file

        check_output_file(opts.log_file, "--log-file")
    if opts.checkpoint_dir and Path(opts.checkpoint_dir).exists() and not Path(opts.checkpoint_dir).is_dir():
        raise UserInputError(f"--checkpoint-dir {opts.checkpoint_dir!r} is a file; it must name a folder")


def check_log_file(opts) -> None:
    """--log-file can become this run's log: a new run refuses a file holding a log (two runs' rows are never
    mixed); a resumed one needs the columns this command writes (`StepLog`). Rank 0
    (the one that writes the log) checks it before it makes the file, and before any rank starts."""
    path = Path(opts.log_file) if opts.log_file else None
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return
    if not opts.resume:
        raise UserInputError(f"--log-file {opts.log_file!r} holds the log of another run; remove it, name another "
                             "file, or pass --resume to continue that run")
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline().strip()
    if header != ",".join(LOG_COLUMNS):
        raise UserInputError(f"--log-file {opts.log_file!r} is not a log of `train` (its first line is not "
                             f"{','.join(LOG_COLUMNS)}); name another file")


def log_cells(row: dict) -> list[str]:
    """`row`'s cells as the --log-file CSV holds them (its columns in order, as the csv module writes them): what a
    checkpoint records of its step's row, so that a resumed run can tell its own log by content."""
    import csv
    import io

    text = io.StringIO()
    csv.DictWriter(text, fieldnames=LOG_COLUMNS, extrasaction="ignore").writerow(row)
    return next(csv.reader(io.StringIO(text.getvalue())))


def check_log_owner(opts, meta: dict | None) -> None:
    """A resumed run keeps its --log-file's rows up to the checkpoint's step and drops the later ones, so the file
    must be this run's log, told by content, never by path: its row of the checkpoint's step must be the one the
    checkpoint recorded (`log_row`: the step's time and memory make it one run's). A file without rows has nothing
    to lose; no checkpoint to resume (`meta` None) means a new run, which writes into no file holding rows; a
    checkpoint of an earlier version, which recorded no row, is not checked. Rank 0 checks it before it makes the
    log file."""
    import csv
    import io

    path = Path(opts.log_file) if opts.log_file else None
    if path is None or not path.is_file():
        return
    rows = [r for r in csv.reader(io.StringIO(path.read_text(encoding="utf-8", errors="replace")))
            if r and r[0].isdigit()]
    if not rows:  # no row to lose (an empty file, or a header alone)
        return
    if meta is None:
        raise UserInputError(f"--log-file {opts.log_file!r} holds the rows of another run and --checkpoint-dir "
                             "holds no checkpoint of it; remove the file or name another")
    recorded = meta.get("log_row")
    if recorded is None:
        return
    mine = [r for r in rows if r[0] == str(meta["step"])]
    if mine != [recorded]:
        raise UserInputError(f"--log-file {opts.log_file!r} is not the log of the run checkpointed at step "
                             f"{meta['step']} (its row of that step is not the one the checkpoint recorded); it is "
                             "left as it is: name this run's log, or another file")


def refuse_untrainable(opts, start: int, period: int, cap: int, unit: int, targets, steps: int | None = None) -> None:
    """`UserInputError` unless every step this run trains (its first `steps`, default `opts.steps`) has a
    next-token target: `targets(step)` counts a step's (positions whose next token the loss predicts); steps
    repeat every `period` steps, so at most `period` of them are looked at. A 1-token document has none: a step
    of only such documents would train on nothing and log a loss of 0.0."""
    if cap < unit:
        raise UserInputError(f"--max-len {opts.max_len} is below the layout unit {unit} of this world size (2 x "
                             "ranks): no step fits it")
    for step in range(start, min(opts.steps if steps is None else steps, start + period)):
        if targets(step) == 0:
            raise UserInputError(f"--dataset {opts.dataset}: step {step + 1} has nothing to train on (its documents "
                                 "are 1 token long, no next token to predict); give documents of at least 2 tokens")


class TokenDocuments:
    """Token-id documents in training order (module docstring)."""

    def __init__(self, docs: list[list[int]], order: str = "file", seed: int = 0):
        from paradyse_lab.workload.text_data import ordered

        if not docs:
            raise UserInputError("the token file holds no documents")
        self.docs = ordered(docs, order, seed)  # file, shuffled or sorted

    @classmethod
    def from_options(cls, opts, dataset: str, vocab: int | None = None) -> TokenDocuments | None:
        """The documents of `dataset` for the run `opts`: a text dataset tokenized with `opts.tokenizer`,
        or a token file (`from_dataset`), in `opts.data_order` (default: file
        order); None for a workload or a length file. With `vocab` (the model's vocabulary size), an id at or
        beyond it is refused here, before any step, naming the file and line (or the tokenizer)."""
        from paradyse_lab.workload import text_data

        order = opts.data_order or "file"
        flag = "--dataset" if dataset == opts.dataset else "--eval-dataset"
        if opts.tokenizer:
            texts = text_data.read_texts(dataset, opts.text_column, flag)
            docs = text_data.tokenize(texts, opts.tokenizer)
            over = _first_beyond(docs, vocab)
            if over is not None:
                raise UserInputError(f"--tokenizer {opts.tokenizer!r} gives token id {_shown(over[1])} for "
                                     f"{flag} {dataset!r}, outside the model's vocabulary (size {vocab}); "
                                     "give the tokenizer the model was made for")
            return cls(docs, order, opts.seed)
        return cls.from_dataset(dataset, order, opts.seed, flag, vocab)

    @classmethod
    def from_dataset(cls, dataset: str, order: str = "file", seed: int = 0,
                     flag: str = "--dataset", vocab: int | None = None) -> TokenDocuments | None:
        """The documents of `file:PATH.jsonl` (lists of ids, or objects with `input_ids`), else None; `flag` is
        the option that named it, for the messages. With `vocab`, an id >= vocab is a one-line error naming the
        file, its line and the vocabulary size (an id beyond a 64-bit integer would otherwise end in torch's
        overflow traceback at its step)."""
        from paradyse_lab.files import typed_json
        from paradyse_lab.workload.text_data import utf8_lines

        if not (dataset.startswith("file:") and dataset.endswith(".jsonl")):
            return None
        path = Path(dataset[5:])
        docs, lines = [], []
        try:
            for i, line in utf8_lines(path, flag):
                if not line.strip():
                    continue
                row = typed_json.loads_checked(line, f"{path.name} line {i}")
                ids = row.get("input_ids") if isinstance(row, dict) else row
                if not isinstance(ids, list) or not ids or not all(
                        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
                    raise UserInputError(f"{path.name} line {i}: expected a non-empty list of token ids >= 0 "
                                         "or {'input_ids': [...]}")
                docs.append(ids)
                lines.append(i)
        except OSError as err:
            raise UserInputError(f"{flag} token file {str(path)!r} cannot be read ({err.strerror or err})") from None
        over = _first_beyond(docs, vocab)
        if over is not None:
            raise UserInputError(f"{flag} token file {str(path)!r} line {lines[over[0]]}: token id "
                                 f"{_shown(over[1])} is outside the model's vocabulary (size {vocab}: ids 0 to "
                                 f"{vocab - 1})")
        return cls(docs, order, seed)

    def rows(self, step: int, batch: int) -> list[list[int]]:
        """The documents step `step` trains."""
        return [self.docs[(step * batch + i) % len(self.docs)] for i in range(batch)]

    def row_targets(self, step: int, batch: int, s: int) -> int:
        """Next-token targets of the step at length `s`: each row's tokens but its last."""
        return sum(max(min(len(r), s) - 1, 0) for r in self.rows(step, batch))

    def row_length(self, step: int, batch: int, unit: int, cap: int) -> int:
        """The step's sequence length: its longest document padded to `unit`, at most `cap`
        (`paradyse_lab.core.strategies.step_length`, the rule of every step)."""
        from paradyse_lab.core.strategies import step_length

        return step_length(max(len(r) for r in self.rows(step, batch)), unit, cap)

    def row_batch(self, step: int, batch: int, s: int, vocab: int):
        """([b, s] token ids, [b, s] next-token labels with -100 at padding and each row's end)."""
        import torch

        tokens = torch.zeros(batch, s, dtype=torch.long)
        labels = torch.full((batch, s), IGNORE, dtype=torch.long)
        for i, doc in enumerate(self.rows(step, batch)):
            ids = torch.tensor(doc[:s], dtype=torch.long)
            if int(ids.max()) >= vocab:
                raise UserInputError(f"token id {int(ids.max())} is outside the model's vocabulary (size {vocab})")
            tokens[i, : len(ids)] = ids
            labels[i, : len(ids) - 1] = ids[1:]
        return tokens, labels


def _first_beyond(docs: list[list[int]], vocab: int | None) -> tuple[int, int] | None:
    """(document index, id) of the first token id >= `vocab`, or None (always None without a vocabulary)."""
    if vocab is None:
        return None
    for i, doc in enumerate(docs):
        top = max(doc)
        if top >= vocab:
            return i, top
    return None


def _shown(token: int) -> str:
    """A token id as a message shows it: whole up to 24 digits, else its first digits and its length."""
    text = str(token)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text):,} digits)"


class PackedSteps:
    """The packed steps of `--pack-tokens` (module docstring)."""

    def __init__(self, doc_lengths: list[int], steps: list[tuple[int, ...]], p: int, docs: TokenDocuments | None,
                 cap: int, original: list[int] | None = None):
        from paradyse_lab.runtime.model.packed import pack_sequence

        self.steps, self.docs, self.cap = steps, docs, cap
        self.original = list(original) if original is not None else list(doc_lengths)
        """Each document's length before the cut to `cap`."""
        self.packs = [pack_sequence([doc_lengths[i] for i in step], p) for step in steps]

    @classmethod
    def from_file_steps(cls, steps, cap: int, p: int) -> PackedSteps:
        """The steps of a packed length file (several lengths per line: `paradyse-lab data lengths --pack-tokens`),
        as they are, each document cut to `cap`."""
        original = [int(n) for step in steps for n in step]
        doc_lengths = [min(n, cap) for n in original]
        ends = [0]
        for step in steps:
            ends.append(ends[-1] + len(step))
        return cls(doc_lengths, [tuple(range(a, b)) for a, b in zip(ends, ends[1:])], p, None, cap, original)

    @classmethod
    def build(cls, opts, lengths, docs: TokenDocuments | None, cap: int, p: int) -> PackedSteps:
        """Pack the workload's `lengths` (or the token file's documents), each cut to `cap`, into steps of at
        most `opts.pack_tokens` tokens in `opts.pack_order`."""
        from paradyse_lab.workload.packing import pack_document_indices

        original = [len(d) if docs is not None else int(d) for d in (docs.docs if docs else lengths)]
        doc_lengths = [min(n, cap) for n in original]
        return cls(doc_lengths, pack_document_indices(doc_lengths, opts.pack_tokens, opts.pack_order, opts.seed),
                   p, docs, cap, original)

    def cut_tokens(self, step: int) -> int:
        """Tokens of the step's documents beyond the cap, which it does not train."""
        return sum(self.original[i] - min(self.original[i], self.cap) for i in self.steps[step % len(self.steps)])

    def pack(self, step: int):
        """The pack step `step` trains (a `paradyse_lab.costmodel.packed.PackedStep`)."""
        return self.packs[step % len(self.packs)]

    def token_batch(self, step: int, vocab: int):
        """[1, s] token ids of the step's documents from the token file, each followed by its padding (ids 0)."""
        import torch

        from paradyse_lab.runtime.model.packed import documents_of

        pack = self.pack(step)
        docs = [self.docs.docs[i][:self.cap] for i in self.steps[step % len(self.steps)]]
        if max(max(d) for d in docs) >= vocab:
            raise UserInputError(f"token id {max(max(d) for d in docs)} is outside the model's vocabulary "
                                 f"(size {vocab})")
        out = torch.zeros(1, pack.padded_len, dtype=torch.long)
        for place, doc in zip(documents_of(pack, out), docs):  # [1, n_i] views of the pack
            place[0] = torch.tensor(doc, dtype=torch.long)
        return out
