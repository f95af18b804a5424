"""`python -m bench.livemcpbench`: capability search measured on LiveMCPBench, through the real server.

LiveMCPBench (icip-cas/LiveMCPBench, Apache 2.0; `../shared/datasets/livemcpbench`, read its SOURCE.md)
has 70 MCP servers with 527 tools and 95 tasks, each naming the tools that solve it. Each server is
registered as a public agent of one tenant and each tool as one of its skills (`PUT /v1/agents/...`
on a real `capreg serve`, or on `--url`), each task's question is asked as `GET /v1/capabilities?q=`
(and, with `--ard`, as `POST /ard/search`), and the answers are scored against the gold tools beside
two baselines computed in the same run over the same tool texts: a textbook BM25 (bm25s, Snowball
stemmer, English stop words) over name and description, and that BM25 fused by reciprocal-rank
fusion (k = 60) with cosine similarity of wordllama's bundled 256-dimension embeddings.

Metrics (per task, then the mean over tasks whose gold maps to at least one tool):
- recall@5 by tool: the fraction of the task's gold tools found among the first 5 results;
- recall@5 by server: the fraction of the task's gold servers that own one of the first 5 results;
- recall@5 by distinct server: the same over the first 5 distinct servers of the ranking (a server
  that owns several of the first results counts once, so the list reaches further down); what an
  agent-level answer (ARD search) is scored by;
- MRR@10: 1 / the rank of the first result that is a gold tool, 0 when none is in the first 10;
- nDCG@10: binary gains (a gold tool counts once, where it first appears), ideal = min(gold, 10).
A gold tool whose name is held by several servers (`read_file`: Filesystem and Desktop Commander)
is found when any of them is; that is one gold tool, not several.

Needs the `bench` extra (`pip install -e '.[bench]'`): bm25s, PyStemmer and wordllama. Runs offline.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "livemcpbench"
K_RECALL = 5
K_RANK = 10
RRF_K = 60
CAPREG_LIMIT = 50
# What discovery's `q` accepts (registry.discovery.ranking.QUERY_MAX_LENGTH); every system gets the
# same (shortened) question, so the comparison stays fair.
QUERY_MAX_LENGTH = 512
SKILL_ID_MAX_LENGTH = 128
AGENT_ID_MAX_LENGTH = 64
DESCRIPTION_MAX_LENGTH = 4096

# Gold names that name no tool in tools.json, mapped by hand to the tool the same server has under
# its current name (the annotations were written against older releases of these servers).
# Every other gold name must match a tool name exactly; what matches nothing is reported unmapped.
GOLD_ALIASES = {
    "trial_references": "trial_references_getter",  # BioMCP renamed its trial tools *_getter
    "ddg-search": "duckduckgo_web_search",  # the duckduckgo-search server's one search tool
    "get_maven_latest_version": "get_latest_release",  # Maven Dependencies server
    "execute_command": "start_process",  # Desktop Commander renamed execute_command to start_process
}

Gold = frozenset[str]  # the keys (agentId/skillId) any of which counts as finding one gold item


# ----------------------------------------------------------------------------- metrics (pure)


def _first_hits(ranked: Sequence[str], gold: Sequence[Gold], k: int) -> list[int]:
    """The 0-based ranks, within the first k, at which a gold item is first found (each at most once)."""
    found: set[int] = set()
    hits = []
    for rank, key in enumerate(ranked[:k]):
        for i, item in enumerate(gold):
            if i not in found and key in item:
                found.add(i)
                hits.append(rank)
                break
    return hits


def recall_at(ranked: Sequence[str], gold: Sequence[Gold], k: int = K_RECALL) -> float:
    """The fraction of gold items found among the first k results (0 when there is no gold)."""
    if not gold:
        return 0.0
    return sum(1 for item in gold if any(key in item for key in ranked[:k])) / len(gold)


def reciprocal_rank(ranked: Sequence[str], gold: Sequence[Gold], k: int = K_RANK) -> float:
    """1 / the rank of the first result that is gold, 0 when none is in the first k."""
    return next((1 / (rank + 1) for rank, key in enumerate(ranked[:k]) if any(key in item for item in gold)), 0.0)


def ndcg_at(ranked: Sequence[str], gold: Sequence[Gold], k: int = K_RANK) -> float:
    """Binary nDCG@k: a gold item gains 1 where it is first found; the ideal finds min(gold, k) at the top."""
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return sum(1 / math.log2(rank + 2) for rank in _first_hits(ranked, gold, k)) / ideal if ideal else 0.0


def rrf(rankings: Iterable[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Reciprocal-rank fusion: score(d) = sum over rankings of 1 / (k + rank), rank from 1; ties by key."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1 / (k + rank)
    return sorted(scores, key=lambda key: (-scores[key], key))


def distinct_servers(ranked: Sequence[str]) -> list[str]:
    """The ranked keys (agentId/skillId) less every one whose agent came earlier: servers in order."""
    seen: set[str] = set()
    out = []
    for key in ranked:
        agent = key.split("/", 1)[0]
        if agent not in seen:
            seen.add(agent)
            out.append(key)
    return out


def score(ranked: Sequence[str], task: Task) -> dict[str, float]:
    """The metrics of one ranked list of tool keys for one task."""
    return {
        "recall@5_tool": recall_at(ranked, task.gold_tools, K_RECALL),
        "recall@5_server": recall_at(ranked, task.gold_servers, K_RECALL),
        "recall@5_distinct_server": recall_at(distinct_servers(ranked), task.gold_servers, K_RECALL),
        "mrr@10": reciprocal_rank(ranked, task.gold_tools, K_RANK),
        "ndcg@10": ndcg_at(ranked, task.gold_tools, K_RANK),
    }


METRICS = ("recall@5_tool", "recall@5_server", "recall@5_distinct_server", "mrr@10", "ndcg@10")
# Systems that rank agents, not tools: only their server figures mean anything.
AGENT_RANKERS = ("capreg ARD search",)


def mean_scores(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {m: round(sum(r[m] for r in rows) / len(rows), 3) if rows else 0.0 for m in METRICS}


# ----------------------------------------------------------------------------- the data set


@dataclass
class Tool:
    key: str  # agentId/skillId
    skill_id: str
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class Server:
    agent_id: str
    name: str
    description: str
    category: str
    tools: list[Tool] = field(default_factory=list)


@dataclass
class Task:
    task_id: str
    question: str
    gold_names: list[str]
    gold_tools: list[Gold]
    gold_servers: list[Gold]  # each: every tool key of the servers that hold one gold tool


@dataclass
class Dataset:
    servers: list[Server]
    tasks: list[Task]  # only tasks with at least one mapped gold tool
    mapping: dict[str, Any]

    @property
    def tools(self) -> list[Tool]:
        return [t for s in self.servers for t in s.tools]


def sanitize_id(text: str, pattern_start: str, max_length: int, taken: set[str]) -> str:
    """A capreg identifier from a free name: camelCase split with `_`, lower case, anything but
    [a-z0-9_-] as `-`, a letter first (`pattern_start` prefixed if not), unique in `taken`."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text.strip()).lower()
    s = re.sub(r"[^a-z0-9_-]+", "-", s).strip("-_") or "x"
    if not s[0].isalpha():
        s = pattern_start + s
    s = s[:max_length].rstrip("-_")
    base, n = s, 2
    while s in taken:
        suffix = f"-{n}"
        s = base[: max_length - len(suffix)] + suffix
        n += 1
    taken.add(s)
    return s


def gold_names_of(tools_text: str) -> list[str]:
    """The tool names of an annotation's "1. name\\n2. name" list, in order, without repeats."""
    names: list[str] = []
    for line in tools_text.splitlines():
        name = re.sub(r"^\s*\d+\s*[.)]\s*", "", line).strip().strip("`")
        if name and name not in names:
            names.append(name)
    return names


def load(dataset_dir: Path) -> Dataset:
    raw_servers = json.loads((dataset_dir / "tools.json").read_text(encoding="utf-8"))
    annotations = json.loads((dataset_dir / "all_annotations.json").read_text(encoding="utf-8"))
    servers: list[Server] = []
    agent_ids: set[str] = set()
    by_name: dict[str, list[Tool]] = {}
    server_of: dict[str, Server] = {}
    for entry in raw_servers:
        server = Server(
            agent_id=sanitize_id(entry["name"], "s-", AGENT_ID_MAX_LENGTH, agent_ids),
            name=entry["name"],
            description=entry.get("description") or entry["name"],
            category=entry.get("category") or "",
        )
        skill_ids: set[str] = set()
        for mcp in entry["tools"].values():
            for t in mcp["tools"]:
                skill_id = sanitize_id(t["name"], "t-", SKILL_ID_MAX_LENGTH, skill_ids)
                tool = Tool(
                    key=f"{server.agent_id}/{skill_id}",
                    skill_id=skill_id,
                    name=t["name"],
                    description=t.get("description") or "",
                    input_schema=t.get("inputSchema") or {"type": "object"},
                )
                server.tools.append(tool)
                by_name.setdefault(t["name"], []).append(tool)
                server_of[tool.key] = server
        servers.append(server)

    tasks: list[Task] = []
    unmapped: list[dict[str, str]] = []
    aliased: list[dict[str, str]] = []
    gold_total = ambiguous = 0
    for a in annotations:
        names = gold_names_of(a["Annotator Metadata"]["Tools"])
        gold_tools: list[Gold] = []
        gold_servers: list[Gold] = []
        for name in names:
            gold_total += 1
            candidates = by_name.get(name)
            if candidates is None and name in GOLD_ALIASES:
                candidates = by_name.get(GOLD_ALIASES[name])
                if candidates:
                    aliased.append({"task": a["task_id"], "gold": name, "tool": GOLD_ALIASES[name]})
            if not candidates:
                unmapped.append({"task": a["task_id"], "gold": name})
                continue
            ambiguous += len({server_of[t.key].agent_id for t in candidates}) > 1
            tool_gold = frozenset(t.key for t in candidates)
            if tool_gold not in gold_tools:
                gold_tools.append(tool_gold)
            owners = {server_of[t.key].agent_id: server_of[t.key] for t in candidates}
            server_gold = frozenset(t.key for s in owners.values() for t in s.tools)
            if server_gold not in gold_servers:
                gold_servers.append(server_gold)
        if gold_tools:
            tasks.append(Task(a["task_id"], a["Question"], names, gold_tools, gold_servers))
    mapping = {
        "servers": len(servers),
        "tools": sum(len(s.tools) for s in servers),
        "tasks": len(annotations),
        "tasks_scored": len(tasks),
        "gold_tools": gold_total,
        "gold_mapped_exactly": gold_total - len(aliased) - len(unmapped),
        "gold_mapped_by_alias": aliased,
        "gold_unmapped": unmapped,
        "gold_held_by_several_servers": ambiguous,
    }
    return Dataset(servers, tasks, mapping)


def query_text(question: str, limit: int = QUERY_MAX_LENGTH) -> str:
    """The question as every system is asked it: whitespace collapsed, cut at a word boundary to `limit`."""
    text = " ".join(question.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return cut[: cut.rfind(" ")] if " " in cut else cut


def tool_text(tool: Tool) -> str:
    """Name and description, the name's words split (`get_weread_rank` -> `get weread rank`)."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", tool.name)
    return f"{re.sub(r'[_-]+', ' ', words)}. {tool.description}"


# ----------------------------------------------------------------------------- the baselines


class Bm25:
    """bm25s (Lucene's BM25, k1 1.5, b 0.75) over name and description, Snowball English stemmer and
    English stop words."""

    def __init__(self, tools: Sequence[Tool]):
        import logging

        import bm25s
        import Stemmer

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.keys = [t.key for t in tools]
        self.stemmer = Stemmer.Stemmer("english")
        self.retriever = bm25s.BM25()
        self.retriever.index(
            bm25s.tokenize([tool_text(t) for t in tools], stopwords="en", stemmer=self.stemmer, show_progress=False),
            show_progress=False,
        )
        self.vocab = set(self.retriever.vocab_dict)

    def rank(self, text: str) -> list[str]:
        import bm25s

        tokens = bm25s.tokenize([text], stopwords="en", stemmer=self.stemmer, return_ids=False, show_progress=False)
        words = [w for w in tokens[0] if w in self.vocab]
        if not words:
            return []
        docs, scores = self.retriever.retrieve([words], k=len(self.keys), show_progress=False)
        return [self.keys[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def load_wordllama(cache_dir: Path) -> Any:
    """wordllama's bundled weights, offline: its loader looks for the tokenizer where the wheel does not
    put it, so the wheel's `tokenizers/` is copied into a cache directory (docs: stack notes)."""
    import wordllama
    from wordllama import WordLlama

    shutil.copytree(Path(wordllama.__file__).parent / "tokenizers", cache_dir / "tokenizers", dirs_exist_ok=True)
    return WordLlama.load(cache_dir=cache_dir, disable_download=True)


class Embeddings:
    def __init__(self, tools: Sequence[Tool], cache_dir: Path):
        self.model = load_wordllama(cache_dir)
        self.keys = [t.key for t in tools]
        self.vectors = self.model.embed([tool_text(t) for t in tools], norm=True)

    def rank(self, text: str) -> list[str]:
        similarity = self.vectors @ self.model.embed([text], norm=True)[0]
        order = sorted(range(len(self.keys)), key=lambda i: (-float(similarity[i]), self.keys[i]))
        return [self.keys[i] for i in order]


# ----------------------------------------------------------------------------- capreg


def skill_body(tool: Tool, schema: dict[str, Any] | None, description_limit: int | None) -> dict[str, Any]:
    description = tool.description or tool.name
    if description_limit is not None:
        description = description[:description_limit]
    return {
        "id": tool.skill_id,
        "name": tool.name[:256],
        "description": description,
        "version": "1.0.0",
        "inputSchema": schema if schema is not None else {"type": "object"},
        "scopes": [],
        "sideEffect": "none",
    }


def _without_schema_keywords(schema: Any) -> Any:
    """The schema without `$schema` and `$id` anywhere (capreg refuses keywords that could fetch)."""
    if isinstance(schema, dict):
        return {k: _without_schema_keywords(v) for k, v in schema.items() if k not in ("$schema", "$id")}
    if isinstance(schema, list):
        return [_without_schema_keywords(v) for v in schema]
    return schema


# The forms tried in order until the server accepts the agent: its tools' own schemas, the same
# without `$schema`/`$id`, permissive schemas, and finally descriptions cut to capreg's cap.
ATTEMPTS = ("own schemas", "schemas without $schema/$id", "permissive schemas", "descriptions truncated")


def agent_body(server: Server, attempt: int) -> dict[str, Any]:
    def schema(tool: Tool) -> dict[str, Any] | None:
        if attempt == 0:
            return copy.deepcopy(tool.input_schema)
        if attempt == 1:
            return _without_schema_keywords(tool.input_schema)
        return None

    return {
        "name": server.name[:256],
        "description": server.description[:DESCRIPTION_MAX_LENGTH],
        "version": "1.0.0",
        "supportedInterfaces": [
            {
                "url": f"https://{re.sub(r'[^a-z0-9-]', '-', server.agent_id)}.livemcpbench.example/a2a",
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
            }
        ],
        "capabilities": {"streaming": False},
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "visibility": "public",
        "sharedWith": [],
        "skills": [skill_body(t, schema(t), DESCRIPTION_MAX_LENGTH if attempt >= 3 else None) for t in server.tools],
    }


async def register(client: Any, tenant: str, headers: dict[str, str], servers: Sequence[Server]) -> dict[str, Any]:
    """PUT every server as an agent; per server the first accepted form (ATTEMPTS). Returns counts."""
    forms: dict[str, int] = {}
    refusals: list[dict[str, Any]] = []
    truncated = 0
    for server in servers:
        for attempt in range(len(ATTEMPTS)):
            response = await client.put(
                f"/v1/agents/{tenant}/{server.agent_id}", json=agent_body(server, attempt), headers=headers
            )
            if response.status_code in (200, 201):
                forms[ATTEMPTS[attempt]] = forms.get(ATTEMPTS[attempt], 0) + len(server.tools)
                if attempt >= 3:
                    truncated += sum(1 for t in server.tools if len(t.description) > DESCRIPTION_MAX_LENGTH)
                break
            refusals.append({"agent": server.agent_id, "form": ATTEMPTS[attempt], "status": response.status_code})
            refusals[-1]["answer"] = response.text[:300]
        else:
            raise SystemExit(f"capreg refused {server.agent_id} in every form: {refusals[-len(ATTEMPTS) :]}")
    return {"skills_by_form": forms, "descriptions_truncated": truncated, "refusals": refusals}


async def ask_capreg(client: Any, tenant: str, text: str) -> list[str]:
    # Deep enough for the first 5 distinct servers.
    response = await client.get("/v1/capabilities", params={"tenant": tenant, "q": text, "limit": CAPREG_LIMIT})
    response.raise_for_status()
    return [f"{item['agentId']}/{item['id']}" for item in response.json()["items"]]


async def ask_ard(client: Any, text: str, by_agent: dict[str, Server]) -> list[str]:
    """ARD search ranks agents: each agent's tool keys, in agent order (scored by server only)."""
    response = await client.post("/ard/search", json={"query": {"text": text}, "pageSize": K_RANK})
    response.raise_for_status()
    keys: list[str] = []
    for result in response.json()["results"]:
        agent_id = result["identifier"].rsplit(":", 1)[-1]
        if agent_id in by_agent:
            keys.append(by_agent[agent_id].tools[0].key)
    return keys


async def run_capreg(base: str, token: str, tenant: str, data: Dataset, ard: bool) -> dict[str, Any]:
    import httpx

    by_agent = {s.agent_id: s for s in data.servers}
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        started = time.monotonic()
        registration = await register(client, tenant, {"Authorization": f"Bearer {token}"}, data.servers)
        registration["seconds"] = round(time.monotonic() - started, 1)
        rankings: dict[str, list[list[str]]] = {"capreg": []}
        if ard:
            rankings["capreg ARD search"] = []
        for task in data.tasks:
            text = query_text(task.question)
            rankings["capreg"].append(await ask_capreg(client, tenant, text))
            if ard:
                rankings["capreg ARD search"].append(await ask_ard(client, text, by_agent))
    return {"registration": registration, "rankings": rankings}


# ----------------------------------------------------------------------------- the run


def evaluate(data: Dataset, rankings: dict[str, list[list[str]]]) -> dict[str, Any]:
    systems = {}
    for system, ranked in rankings.items():
        rows = [score(r, t) for r, t in zip(ranked, data.tasks, strict=True)]
        systems[system] = {
            "means": mean_scores(rows),
            "tasks": [
                {"task": t.task_id, "top5": r[:K_RECALL], **row}
                for t, r, row in zip(data.tasks, ranked, rows, strict=True)
            ],
        }
    return systems


def baselines(data: Dataset) -> dict[str, list[list[str]]]:
    bm25 = Bm25(data.tools)
    with tempfile.TemporaryDirectory(prefix="capreg-wordllama-") as cache:
        embeddings = Embeddings(data.tools, Path(cache))
        out: dict[str, list[list[str]]] = {"BM25": [], "BM25 + wordllama (RRF)": []}
        for task in data.tasks:
            text = query_text(task.question)
            lexical = bm25.rank(text)
            out["BM25"].append(lexical)
            out["BM25 + wordllama (RRF)"].append(rrf([lexical, embeddings.rank(text)]))
    return out


def table(systems: dict[str, Any]) -> str:
    titles = ("recall@5 tool", "recall@5 server", "distinct servers", "MRR@10", "nDCG@10")
    lines = [f"{'system':<26}" + "".join(f"{t:>18}" for t in titles)]
    for system, result in systems.items():
        row = f"{system:<26}"
        for metric in METRICS:
            shown = system not in AGENT_RANKERS or "server" in metric
            row += f"{result['means'][metric]:>18.3f}" if shown else f"{'-':>18}"
        lines.append(row)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.livemcpbench", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help=f"default {DEFAULT_DATASET}")
    parser.add_argument("--url", help="a running capreg (default: start `capreg serve` on embedded PostgreSQL)")
    parser.add_argument(
        "--token", help="with --url: a caller token with registry:publish for --tenant (default CAPREG_TOKEN)"
    )
    parser.add_argument("--tenant", default="livemcpbench", help="the tenant the servers are registered in")
    parser.add_argument("--ard", action="store_true", help="also ask POST /ard/search (agents: scored by server)")
    parser.add_argument("--baselines-only", action="store_true", help="skip capreg (no server)")
    parser.add_argument("--json", type=Path, help="write the report (means, per-task scores, mapping) here")
    args = parser.parse_args(argv)

    if not (args.dataset / "tools.json").is_file() or not (args.dataset / "all_annotations.json").is_file():
        print(f"LiveMCPBench not found at {args.dataset} (tools.json, all_annotations.json): skipped")
        return 0
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
        import wordllama  # noqa: F401
    except ImportError as missing:
        raise SystemExit(
            f"{missing.name} is missing: pip install -e '.[bench]' (bm25s, PyStemmer, wordllama)"
        ) from None
    data = load(args.dataset)
    m = data.mapping
    print(
        f"LiveMCPBench: {m['servers']} servers, {m['tools']} tools, {m['tasks']} tasks ({m['tasks_scored']} with a "
        f"mapped gold tool); gold tools {m['gold_tools']}: {m['gold_mapped_exactly']} by exact name, "
        f"{len(m['gold_mapped_by_alias'])} by alias, {len(m['gold_unmapped'])} unmapped "
        f"({', '.join(u['gold'] for u in m['gold_unmapped']) or 'none'}); "
        f"{m['gold_held_by_several_servers']} held by several servers",
        flush=True,
    )
    shortened = sum(1 for t in data.tasks if query_text(t.question) != " ".join(t.question.split()))
    rankings = baselines(data)
    capreg: dict[str, Any] = {}
    if not args.baselines_only:
        import logging

        logging.getLogger("httpx").setLevel(logging.WARNING)
        if args.url:
            token = args.token or os.environ.get("CAPREG_TOKEN")
            if not token:
                raise SystemExit("--url needs --token (or CAPREG_TOKEN) with registry:publish for --tenant")
            capreg = asyncio.run(run_capreg(args.url.rstrip("/"), token, args.tenant, data, args.ard))
        else:
            from bench.__main__ import Capreg

            os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="capreg-lmb-run-"))
            home = Path(tempfile.mkdtemp(prefix="capreg-lmb-"))
            registry = Capreg(None, 1, home)
            try:
                registry.start()
                token = registry.mint({"publisher": (args.tenant, "livemcpbench", ["registry:publish"], None)})
                capreg = asyncio.run(run_capreg(registry.base, token["publisher"], args.tenant, data, args.ard))
            finally:
                registry.stop()
                shutil.rmtree(home, ignore_errors=True)
        rankings = {**capreg["rankings"], **rankings}
        reg = capreg["registration"]
        print(
            f"registered in {reg['seconds']}s: skills by form {reg['skills_by_form']}, "
            f"{reg['descriptions_truncated']} descriptions truncated, {len(reg['refusals'])} refused forms",
            flush=True,
        )
    systems = evaluate(data, rankings)
    print(f"{len(data.tasks)} tasks; {shortened} questions cut to {QUERY_MAX_LENGTH} characters for every system")
    print(table(systems))
    if args.json:
        report = {
            "dataset": str(args.dataset),
            "mapping": m,
            "questions_shortened": shortened,
            "registration": capreg.get("registration"),
            "systems": systems,
        }
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
