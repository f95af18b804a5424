"""The search engine behind ranked search (docs/api.md#ranked-search): one in-memory index per
process of every capability version's words, and optionally of its meaning, that proposes the best
candidates for a query in bounded work. It never decides what a caller may see: the database checks
every candidate against the rules that decide it (db.ranked_search.checked_page).

- Words: tantivy (BM25, an English stemmer and stop words, top-k retrieval with block-max WAND)
  over the whole record, plus evidence from its id and name, tags and examples, and a little from
  its agent's name and description (FIELD_BOOSTS). A query word of 5 or more letters that no record
  holds also matches records one typing error away (a fuzzy term: a Levenshtein automaton over the
  term dictionary, transpositions counting one).
- Meaning: a unit vector per version (registry.search.embeddings), the closest ones found by exact
  dot products over a matrix; one the words did not find must be close enough on its own.
- Fusion (`fuse`): a convex combination of the words' BM25 (relative to the best candidate's) and
  the cosine similarity, over the candidates of both lists, each cut at a fixed depth, so a
  version's score does not depend on the page asked for; the score is an integer in [0, SCORE_SCALE].

Each list is cut at a fixed depth (WORD_DEPTH, MEANING_DEPTH): a query's work grows with those and
with the corpus's posting lists, never with how many records match. Pre-filters (visibility, the
latest marker, key and content filters) only narrow what the engine proposes; they never widen it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
import numpy as np
import tantivy

from registry.core.search_words import capability_words, words_of_id
from registry.search.embeddings import Embedder

# Texts embedded at a time while indexing.
EMBED_BATCH = 512
# Fixed depths of the two ranked lists: a query never reads more hits than these.
WORD_DEPTH = 400
MEANING_DEPTH = 200
# The meaning list's pre-filters are first tried on this many times MEANING_DEPTH closest rows.
MEANING_SHORTLIST = 4
# Rows below this similarity are left out of the shortlist's partition when enough are above it.
SHORTLIST_FLOOR = 0.3
# Below this cosine similarity a version is not proposed for its meaning alone, though its
# similarity still counts towards a version the words found (unit vectors: unrelated texts score
# about 0-0.3 with the default model; a paraphrase 0.5 and more).
MEANING_FLOOR = 0.45
# Fusion (`fuse`): the words' share of a score; the rest is closeness in meaning.
WORD_SHARE = 0.7
# Scores are integers: the fused score in [0, 1] times this.
SCORE_SCALE = 1_000_000
# Field weights (boosts of each field's BM25): `all` is the record's whole text (id, name, tags, description) under one length norm: textbook BM25.
# The head fields add evidence on top of it (a word in the id or name counts in both), the agent's
# name and description a little (they describe every skill of the agent alike).
FIELD_BOOSTS = {"all": 1.0, "name": 0.5, "tags": 0.5, "examples": 0.5, "agent": 0.2}
TEXT_FIELDS = ("all", "name", "tags", "examples", "agent")
# A correction's constant score (a word's own match in a field scores by BM25, typically 1-10).
FUZZY_BOOST = 1.0
# Words longer than this are never indexed (remove_long); query words too (they could match nothing).
WORD_MAX_CHARS = 40
# One typing error is tolerated in words of this many characters or more (shorter ones are too
# ambiguous), when no record holds the word itself.
FUZZY_MIN_CHARS = 5
# Words of one query corrected at most (each is an automaton walk of the term dictionary).
FUZZY_WORDS_MAX = 4
# The examples of a version that are indexed, and each one's characters (registration caps bound them too).
EXAMPLES_MAX, EXAMPLE_CHARS_MAX = 16, 512


class Document(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine knows of one capability version (db.search_index's rows)."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    agent_name: str = ""
    agent_description: str = ""
    public: bool = False
    shared_with: tuple[str, ...] = ()
    latest: bool = False
    status: str = "active"
    side_effect_rank: int = 0
    regions: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.tenant}/{self.agent_id}/{self.skill_id}@{self.version}"

    @property
    def meaning_text(self) -> str:
        return " ".join(capability_words(self.skill_id, self.name, self.tags, self.description))


class Proposal(msgspec.Struct, frozen=True, kw_only=True):
    """Which versions a query may be answered from, and what the engine may pre-filter on: the
    same filters the database then applies (registry.discovery.ranking.SearchFilters)."""

    viewer: str | None
    latest_only: bool = True
    tenant: str | None = None
    agent: str | None = None
    skill: str | None = None  # an exact skill id (a prefix is left to the database)
    tags: tuple[str, ...] = ()
    side_effect_max: int | None = None
    region: str | None = None
    status: str | None = None


class Hit(msgspec.Struct, frozen=True, array_like=True):
    """One proposed version: its key, ref (the tie order) and fused score."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str
    score: int

    @property
    def ref(self) -> str:
        return f"{self.tenant}/{self.agent_id}/{self.skill_id}@{self.version}"


def fuse(evidence: dict[int, float], closeness: dict[int, float], *, meaning: bool) -> dict[int, int]:
    """Each candidate's score in [0, SCORE_SCALE]: WORD_SHARE of its BM25 relative to the best
    candidate's, plus the rest of its cosine similarity to the query (0 when below zero). A convex
    combination of scores, not of ranks: a word only one record holds keeps its weight, and equal
    records score equally whatever order a list returned them in (docs/performance.md#ranked-search
    measures it against reciprocal rank fusion). Without meaning, the words' share is all."""
    best = max(evidence.values(), default=0.0)
    share = WORD_SHARE if meaning else 1.0
    fused = {}
    for slot in evidence.keys() | closeness.keys():
        words = evidence.get(slot, 0.0) / best if best > 0 else 0.0
        score = share * words + (1.0 - share) * max(0.0, closeness.get(slot, 0.0))
        fused[slot] = min(SCORE_SCALE, round(score * SCORE_SCALE))
    return fused


def document_audiences(d: Document) -> list[str]:
    """Who may be proposed `d`, as terms: "*" (anyone: public), "t:T" (its tenant T), "s:V" (a
    viewer V it is shared with), each under "A" (any version) and, for a version the latest
    marker holds, "L" too. A query asks for its viewer's terms under one prefix (`audiences`)."""
    who = ["*"] if d.public else []
    who += [f"t:{d.tenant}", *(f"s:{viewer}" for viewer in d.shared_with)]
    return [f"A{w}" for w in who] + ([f"L{w}" for w in who] if d.latest else [])


def audiences(viewer: str | None, *, latest: bool) -> list[str]:
    """The audience terms of what `viewer` may be proposed (anonymous: public records only)."""
    prefix = "L" if latest else "A"
    return [f"{prefix}*"] + ([f"{prefix}t:{viewer}", f"{prefix}s:{viewer}"] if viewer is not None else [])


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        # tantivy drops tokens of at least this many bytes: every word of up to WORD_MAX_CHARS
        # characters (4 bytes each at most in UTF-8) is kept; query_words drops longer ones.
        .filter(tantivy.Filter.remove_long(WORD_MAX_CHARS * 4 + 1))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for field in TEXT_FIELDS:
        builder.add_text_field(field, tokenizer_name="capreg_en", index_option="freq")
    for field in (
        "agent_key",
        "tenant",
        "agent_id",
        "skill_id",
        "audience",
        "tag",
        "region",
        "status",
    ):
        builder.add_text_field(field, tokenizer_name="raw", index_option="basic")
    builder.add_boolean_field("any_region", indexed=True)
    builder.add_integer_field("side_effect_rank", indexed=True, fast=True)
    builder.add_integer_field("slot", fast=True)
    return builder.build()


class _Vectors:
    """Unit vectors of indexed versions by slot, with the facts the meaning list pre-filters on.
    Grows by doubling; a replaced version's row is marked dead and reused by no one (compacted
    when most rows are dead)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.matrix = np.zeros((0, dim), dtype=np.float32)
        self.alive = np.zeros(0, dtype=bool)
        self.public = np.zeros(0, dtype=bool)
        self.latest = np.zeros(0, dtype=bool)
        self.side_effect = np.zeros(0, dtype=np.int8)
        self.tenant = np.zeros(0, dtype=np.int32)
        self.slots = np.zeros(0, dtype=np.int32)
        self.size = 0
        self.dead = 0
        # slot -> row (-1: none): slots are small dense integers (SearchIndex reuses freed ones).
        self.row_of_slot = np.full(0, -1, dtype=np.int32)

    def _grow(self, need: int) -> None:
        capacity = max(1024, len(self.alive))
        while capacity < need:
            capacity += capacity // 4  # at most a quarter unused: the matrix is most of the memory
        if capacity == len(self.alive):
            return
        for name in ("matrix", "alive", "public", "latest", "side_effect", "tenant", "slots"):
            old = getattr(self, name)
            new = np.zeros((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def row(self, slot: int) -> int:
        return int(self.row_of_slot[slot]) if slot < len(self.row_of_slot) else -1

    def add(self, rows: list[tuple[int, np.ndarray, bool, bool, int, int]]) -> None:
        self._grow(self.size + len(rows))
        top = max(slot for slot, *_ in rows) + 1 if rows else 0
        if top > len(self.row_of_slot):
            grown = np.full(max(top, len(self.row_of_slot) + len(self.row_of_slot) // 4), -1, dtype=np.int32)
            grown[: len(self.row_of_slot)] = self.row_of_slot
            self.row_of_slot = grown
        for slot, vector, public, latest, side_effect, tenant in rows:
            i = self.size
            self.matrix[i] = vector
            self.alive[i], self.public[i], self.latest[i] = True, public, latest
            self.side_effect[i], self.tenant[i], self.slots[i] = side_effect, tenant, slot
            self.row_of_slot[slot] = i
            self.size += 1

    def remove(self, slot: int) -> None:
        i = self.row(slot)
        if i >= 0:
            self.row_of_slot[slot] = -1
            self.alive[i] = False
            self.dead += 1

    def compact(self) -> None:
        keep = np.flatnonzero(self.alive[: self.size])
        for name in ("matrix", "alive", "public", "latest", "side_effect", "tenant", "slots"):
            setattr(self, name, np.ascontiguousarray(getattr(self, name)[keep]))
        self.size, self.dead = len(keep), 0
        row_of_slot = np.full(len(self.row_of_slot), -1, dtype=np.int32)  # new: a reader may hold the old one
        row_of_slot[self.slots[: self.size]] = np.arange(self.size)
        self.row_of_slot = row_of_slot

    @property
    def nbytes(self) -> int:
        return sum(
            getattr(self, n).nbytes
            for n in ("matrix", "alive", "public", "latest", "side_effect", "tenant", "slots", "row_of_slot")
        )


class SearchIndex:
    """The engine: `replace` keeps it current (whole agents at a time), `propose` answers queries.

    Writes happen on one task at a time (registry.search.index_sync); `propose` may run on worker
    threads meanwhile: it reads one searcher (a consistent snapshot) and the vector arrays as they
    are. A slot freed and reused by a write during a query can make that one query propose the new
    version in the old one's place: harmless, because the database checks every candidate."""

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.schema = _schema()
        self.analyzer = _analyzer()
        self.index = tantivy.Index(self.schema)
        self.index.register_tokenizer("capreg_en", self.analyzer)
        # One indexing thread with tantivy's smallest arena: writes are whole agents, a few at a time.
        self._writer = self.index.writer(heap_size=15_000_000, num_threads=1)
        self.searcher = self.index.searcher()
        self.embedder = embedder
        self.vectors = _Vectors(embedder.dim) if embedder is not None else None
        # slot -> the version's key (tenant, agent, skill, version joined by NUL, which no stored
        # string holds); a slot is an index into this list, freed slots are reused, so it stays as
        # long as the live versions (one string each: the engine's only per-version Python object).
        self._keys: list[str | None] = []
        self._free: list[int] = []
        self._live = 0
        self._tenant_ids: dict[str, int] = {}
        self._shared: dict[int, tuple[str, ...]] = {}
        # viewer -> slots of versions shared with it (the meaning list's pre-filter).
        self._shared_to: dict[str, set[int]] = {}
        self._lock = threading.Lock()

    # -- writes ----------------------------------------------------------------------------------

    def replace(self, agents: Iterable[tuple[str, str]], documents: Sequence[Document]) -> None:
        """Forget every version of `agents`, then index `documents` (their versions as they are
        now; an agent with none is gone). Visible to `propose` when this returns."""
        with self._lock:
            for tenant, agent_id in agents:
                key = f"{tenant}/{agent_id}"
                slots = self._slots_of(key)
                if not slots:
                    continue
                self._writer.delete_documents_by_term("agent_key", key)
                for slot in slots:
                    if self._keys[slot] is None:
                        continue
                    self._keys[slot] = None
                    self._free.append(slot)
                    self._live -= 1
                    for viewer in self._shared.pop(slot, ()):
                        self._shared_to.get(viewer, set()).discard(slot)
                    if self.vectors is not None:
                        self.vectors.remove(slot)
            self._add(documents)
            self._writer.commit()
            self.index.reload()
            self.searcher = self.index.searcher()
            if self.vectors is not None and self.vectors.dead > max(1024, self.vectors.size // 2):
                # A new object swapped in one assignment: a query on a worker thread keeps the one it took.
                compacted = copy.copy(self.vectors)
                compacted.compact()
                self.vectors = compacted

    def _add(self, documents: Sequence[Document]) -> None:
        vector_rows = []
        meanings = None
        if self.embedder is not None and documents:
            # In slices: the model's working arrays grow with the batch, and the allocator keeps
            # what a process once held.
            texts = [d.meaning_text for d in documents]
            meanings = np.concatenate(
                [self.embedder.embed(texts[i : i + EMBED_BATCH]) for i in range(0, len(texts), EMBED_BATCH)]
            )
        for n, d in enumerate(documents):
            slot = self._free.pop() if self._free else len(self._keys)
            if slot == len(self._keys):
                self._keys.append(None)
            self._keys[slot] = "\x00".join((d.tenant, d.agent_id, d.skill_id, d.version))
            self._live += 1
            key = f"{d.tenant}/{d.agent_id}"
            tenant_id = self._tenant_ids.setdefault(d.tenant, len(self._tenant_ids) + 1)
            if d.shared_with:
                self._shared[slot] = d.shared_with
                for viewer in d.shared_with:
                    self._shared_to.setdefault(viewer, set()).add(slot)
            head, tags, description = capability_words(d.skill_id, d.name, d.tags, d.description)
            doc = tantivy.Document(
                all=f"{head} \n {tags} \n {description}",
                name=head,
                tags=" ".join(words_of_id(t) for t in d.tags),
                examples=" \n ".join(e[:EXAMPLE_CHARS_MAX] for e in d.examples[:EXAMPLES_MAX]),
                agent=f"{words_of_id(d.agent_id)} {d.agent_name} {d.agent_description}",
                agent_key=key,
                tenant=d.tenant,
                agent_id=d.agent_id,
                skill_id=d.skill_id,
                any_region=not d.regions,
                status=d.status,
                side_effect_rank=d.side_effect_rank,
                slot=slot,
            )
            for audience in document_audiences(d):
                doc.add_text("audience", audience)
            for tag in d.tags:
                doc.add_text("tag", tag)
            for region in d.regions:
                doc.add_text("region", region)
            self._writer.add_document(doc)
            if meanings is not None:
                vector_rows.append((slot, meanings[n], d.public, d.latest, d.side_effect_rank, tenant_id))
        if self.vectors is not None and vector_rows:
            self.vectors.add(vector_rows)

    def _slots_of(self, agent_key: str) -> list[int]:
        """The slots of an agent's indexed versions (from the last committed searcher)."""
        query = tantivy.Query.term_query(self.schema, "agent_key", agent_key)
        found: int = self.searcher.search(query, 1, count=True).count  # type: ignore[attr-defined]
        if not found:
            return []
        hits = self.searcher.search(query, found, count=False).hits
        return [int(v) for v in self.searcher.fast_field_values("slot", [a for _, a in hits]) if v is not None]

    def _key(self, slot: int) -> tuple[str, str, str, str] | None:
        key = self._keys[slot] if 0 <= slot < len(self._keys) else None
        if key is None:
            return None
        tenant, agent_id, skill_id, version = key.split("\x00")
        return tenant, agent_id, skill_id, version

    @property
    def size(self) -> int:
        return self._live

    # -- queries ---------------------------------------------------------------------------------

    def terms(self, words: Sequence[str]) -> list[tuple[str, str]]:
        """The index terms of a query's words as (term, word): stemmed, stop words dropped,
        distinct, in order."""
        terms: list[tuple[str, str]] = []
        seen: set[str] = set()
        for word in words:
            for token in self.analyzer.analyze(word):
                if token not in seen:
                    seen.add(token)
                    terms.append((token, word))
        return terms

    def propose(self, words: Sequence[str], where: Proposal) -> list[Hit]:
        """The versions that best match the query's `words` among those `where` admits, best first
        (score descending, then ref bytewise); at most WORD_DEPTH + MEANING_DEPTH of them. Meaning
        is asked of the words the model knows (Embedder.known), if any."""
        searcher = self.searcher
        terms = self.terms(words)
        evidence: dict[int, float] = {}  # slot -> BM25
        if terms:
            hits = searcher.search(self._word_query(searcher, terms, where), WORD_DEPTH, count=False).hits
            slots = searcher.fast_field_values("slot", [address for _, address in hits])
            for (score, _), value in zip(hits, slots, strict=True):
                if value is not None:
                    evidence[int(value)] = score
        closeness: dict[int, float] = {}  # slot -> cosine similarity
        meaning = " ".join(w for w in words if self.embedder is not None and self.embedder.known(w))
        vectors = self.vectors  # one snapshot for the whole query (compaction swaps the object)
        if vectors is not None and self.embedder is not None and meaning:
            query = self.embedder.embed([meaning])[0]
            for slot, sim in self._closest(vectors, query, where):
                if sim >= MEANING_FLOOR:  # proposed for its meaning alone
                    closeness[slot] = sim
            # The words' candidates are scored for meaning too: a dot product each.
            rows = [(slot, vectors.row(slot)) for slot in evidence if slot not in closeness]
            rows = [(slot, row) for slot, row in rows if row >= 0]
            if rows:
                sims = vectors.matrix[[row for _, row in rows]] @ query
                closeness.update((slot, float(sim)) for (slot, _), sim in zip(rows, sims, strict=True))
        fused = fuse(evidence, closeness, meaning=self.vectors is not None)
        proposed = []
        for slot, score in fused.items():
            key = self._key(slot)
            if key is not None:
                proposed.append(Hit(*key, score=score))
        proposed.sort(key=lambda h: (-h.score, h.ref))
        return proposed

    def _word_query(self, searcher: tantivy.Searcher, terms: list[tuple[str, str]], where: Proposal) -> tantivy.Query:
        """One flat union of (field, term) clauses, each BM25 times its field's boost, so tantivy's
        top-k can skip whole blocks of postings that cannot reach the k-th score (block-max WAND):
        a word in every record costs about what a rare one does. The filters are one required,
        zero-scored clause."""
        schema = self.schema
        should: list[tuple[tantivy.Occur, tantivy.Query]] = []
        corrections = 0
        for term, word in terms:
            for field, boost in FIELD_BOOSTS.items():
                if searcher.doc_freq(field, term):  # a clause only for a field that can match
                    clause = tantivy.Query.term_query(schema, field, term)
                    should.append((tantivy.Occur.Should, tantivy.Query.boost_query(clause, boost)))
            # Corrections are tried whether or not some record holds the word: "holds it" counts
            # records of every tenant, and answering differently would tell a caller that an
            # invisible record holds the word (a constant score, so the word itself still ranks first).
            if len(word) >= FUZZY_MIN_CHARS and corrections < FUZZY_WORDS_MAX:
                corrections += 1
                # A word no record holds: records one typing error away, each match scored as a
                # constant (a correction is weaker evidence than the word itself). Both the stem
                # and the word as typed are tried: a typo can change the stem ("calender" stems to
                # "calend", two edits from "calendar").
                for variant in dict.fromkeys((term, word)):
                    fuzzy = tantivy.Query.fuzzy_term_query(
                        schema, "all", variant, distance=1, transposition_cost_one=True
                    )
                    should.append((tantivy.Occur.Should, tantivy.Query.boost_query(fuzzy, FUZZY_BOOST)))
        if not should:
            return tantivy.Query.empty_query()
        filters = [(tantivy.Occur.Must, f) for f in self._filters(where)]
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.boolean_query(should)),
                (tantivy.Occur.Must, tantivy.Query.const_score_query(tantivy.Query.boolean_query(filters), 0.0)),
            ]
        )

    def _filters(self, where: Proposal) -> list[tantivy.Query]:
        schema = self.schema
        term = tantivy.Query.term_query
        # Visibility and the latest marker in one term set (measured 4.5 ms against 7.7 ms for the
        # same as a disjunction of three terms and a conjunction, at 400,000 versions).
        filters = [tantivy.Query.term_set_query(schema, "audience", audiences(where.viewer, latest=where.latest_only))]
        for field, value in (
            ("tenant", where.tenant),
            ("agent_id", where.agent),
            ("skill_id", where.skill),
            ("status", where.status),
        ):
            if value is not None:
                filters.append(term(schema, field, value))
        filters.extend(term(schema, "tag", tag) for tag in where.tags)
        if where.side_effect_max is not None:
            filters.append(
                tantivy.Query.range_query(
                    schema, "side_effect_rank", tantivy.FieldType.Integer, None, where.side_effect_max
                )
            )
        if where.region is not None:
            filters.append(
                tantivy.Query.boolean_query(
                    [
                        (tantivy.Occur.Should, term(schema, "any_region", True)),
                        (tantivy.Occur.Should, term(schema, "region", where.region)),
                    ]
                )
            )
        return filters

    def _closest(self, vectors: _Vectors, query: Any, where: Proposal) -> list[tuple[int, float]]:
        """Slots of the versions closest in meaning to `query` (a unit vector) among those the cheap pre-filters
        admit (visibility, latest marker, tenant, side effect), at most MEANING_DEPTH, closest first,
        with their cosine similarity."""
        embedder = self.embedder
        assert embedder is not None
        n = vectors.size
        if n == 0:
            return []
        similarity = vectors.matrix[:n] @ query
        # The pre-filters are checked on the closest rows first (a few times the depth): most
        # questions keep enough of them, and then no per-row mask of the whole matrix is built.
        shortlist = min(n, MEANING_DEPTH * MEANING_SHORTLIST)
        rows = np.flatnonzero(similarity >= SHORTLIST_FLOOR)  # one cheap pass narrows the partition
        if len(rows) < shortlist:
            rows = np.arange(n)
        if len(rows) > shortlist:
            rows = rows[np.argpartition(-similarity[rows], shortlist - 1)[:shortlist]]
        rows = rows[self._admitted(vectors, rows, where)]
        if len(rows) < MEANING_DEPTH and shortlist < n:
            every = np.arange(n)
            rows = every[self._admitted(vectors, every, where)]
        candidates = rows
        if len(candidates) > MEANING_DEPTH:
            top = np.argpartition(-similarity[candidates], MEANING_DEPTH - 1)[:MEANING_DEPTH]
            candidates = candidates[top]
        order = candidates[np.argsort(-similarity[candidates], kind="stable")]
        closest = [(int(slot), float(similarity[row])) for slot, row in zip(vectors.slots[order], order, strict=True)]
        if where.agent is not None or where.skill is not None:
            closest = [(slot, sim) for slot, sim in closest if self._matches_key(slot, where)]
        return closest

    def _admitted(self, vectors: _Vectors, rows: Any, where: Proposal) -> Any:
        """Which of the vector `rows` the cheap pre-filters admit (visibility, latest marker,
        tenant, side effect); agent and skill are checked on the few closest (_matches_key)."""
        admitted = vectors.alive[rows]
        if where.latest_only:
            admitted &= vectors.latest[rows]
        if where.side_effect_max is not None:
            admitted &= vectors.side_effect[rows] <= where.side_effect_max
        viewer_id = self._tenant_ids.get(where.viewer) if where.viewer is not None else None
        visible = vectors.public[rows]
        if viewer_id is not None:
            visible |= vectors.tenant[rows] == viewer_id
        # Shared records count for any viewer, one that has published nothing included.
        shared = self._shared_to.get(where.viewer) if where.viewer is not None else None
        if shared:
            visible |= np.isin(vectors.slots[rows], np.fromiter(shared, dtype=vectors.slots.dtype))
        admitted &= visible
        if where.tenant is not None:
            admitted &= vectors.tenant[rows] == self._tenant_ids.get(where.tenant, -1)
        return admitted

    def _matches_key(self, slot: int, where: Proposal) -> bool:
        key = self._key(slot)
        return (
            key is not None
            and (where.agent is None or key[1] == where.agent)
            and (where.skill is None or key[2] == where.skill)
        )

    def memory_bytes(self) -> int:
        """The vectors' bytes (the word index's own memory is read off the process: docs/performance.md)."""
        return self.vectors.nbytes if self.vectors is not None else 0
