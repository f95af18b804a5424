"""Deterministic benchmark data: agent cards with realistic skills, schemas, tags and visibility.

Everything is a pure function of (seed, index): the same seed gives byte-identical cards, so runs on
different machines load the same data set, and the load generator can rebuild any card (or a new
version of it) without shipping bodies between processes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TENANTS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka"]
REGIONS = ["eu", "us", "apac", "uk", "ca"]
SIDE_EFFECTS = ["none", "idempotent", "write", "destructive"]
SIDE_EFFECT_WEIGHTS = [50, 25, 20, 5]

DOMAINS = {
    "finance": ["invoice", "payment", "refund", "ledger", "budget", "expense"],
    "crm": ["contact", "lead", "account", "opportunity", "campaign"],
    "hr": ["employee", "payroll", "leave", "candidate", "review"],
    "support": ["ticket", "incident", "sla", "escalation", "faq"],
    "logistics": ["shipment", "order", "warehouse", "carrier", "route"],
    "devops": ["deployment", "build", "alert", "cluster", "secret"],
    "legal": ["contract", "clause", "policy", "compliance", "matter"],
    "analytics": ["report", "dashboard", "metric", "forecast", "cohort"],
}
VERBS = ["lookup", "list", "search", "create", "update", "cancel", "approve", "export", "summarize", "validate"]
VERB_EFFECT = {
    "lookup": "none",
    "list": "none",
    "search": "none",
    "summarize": "none",
    "export": "none",
    "validate": "none",
    "create": "write",
    "update": "idempotent",
    "approve": "write",
    "cancel": "destructive",
}
TAG_VOCABULARY = sorted(
    {*DOMAINS, *(n for ns in DOMAINS.values() for n in ns), "read-only", "bulk", "realtime", "pii", "gdpr", "beta"}
)
ADJECTIVES = ["fast", "reliable", "secure", "batch", "streaming", "audited", "multi-region", "cached"]
PROPERTY_TYPES = ["string", "integer", "number", "boolean", "enum", "object", "array", "date"]


def fleet_load(a: AgentSpec) -> float:
    """The load the benches' fleet instance of `a` reports: in [0, 1), a pure function of its id."""
    return _rng(0, "load", a.tenant, a.agent_id).randrange(100) / 100


@dataclass(frozen=True)
class AgentSpec:
    tenant: str
    agent_id: str
    card: dict


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random(f"{seed}:" + ":".join(str(p) for p in parts))


def _property(rng: random.Random, name: str, depth: int) -> dict:
    kind = rng.choice(PROPERTY_TYPES if depth < 2 else PROPERTY_TYPES[:5])
    if kind == "string":
        prop = {"type": "string", "minLength": 1, "maxLength": rng.choice([32, 64, 256])}
        if rng.random() < 0.3:
            prop["pattern"] = "^[a-z]{2,4}-[0-9]{4,8}$"
    elif kind == "integer":
        prop = {"type": "integer", "minimum": 0, "maximum": rng.choice([100, 10_000, 1_000_000])}
    elif kind == "number":
        prop = {"type": "number", "minimum": 0, "exclusiveMaximum": rng.choice([1, 100, 1e9])}
    elif kind == "boolean":
        prop = {"type": "boolean", "default": rng.random() < 0.5}
    elif kind == "enum":
        prop = {
            "type": "string",
            "enum": rng.sample(["open", "closed", "pending", "paid", "void", "draft", "archived"], rng.randint(2, 5)),
        }
    elif kind == "date":
        prop = {"type": "string", "format": "date-time"}
    elif kind == "array":
        prop = {"type": "array", "items": {"type": "string", "maxLength": 64}, "maxItems": rng.choice([10, 100])}
    else:
        prop = _object_schema(rng, depth + 1, rng.randint(2, 4))
    prop["description"] = f"The {name.replace('_', ' ')}."
    return prop


def _object_schema(rng: random.Random, depth: int, size: int) -> dict:
    names = rng.sample(
        [
            "id",
            "name",
            "status",
            "amount",
            "currency",
            "owner",
            "created",
            "due",
            "notes",
            "region",
            "priority",
            "reference",
            "quantity",
            "email",
            "labels",
            "address",
            "limit",
            "cursor",
        ],
        size,
    )
    props = {n: _property(rng, n, depth) for n in names}
    schema = {
        "type": "object",
        "properties": props,
        "required": sorted(rng.sample(names, rng.randint(1, min(3, size)))),
    }
    if rng.random() < 0.5:
        schema["additionalProperties"] = False
    return schema


def _skill(seed: int, index: int, k: int, domain: str, used: set[str], round_: int) -> dict:
    rng = _rng(seed, "skill", index, k)
    while True:
        noun, verb = rng.choice(DOMAINS[domain]), rng.choice(VERBS)
        skill_id = f"{domain}.{noun}.{verb}"
        if skill_id not in used:
            used.add(skill_id)
            break
    effect = VERB_EFFECT[verb] if rng.random() < 0.8 else rng.choices(SIDE_EFFECTS, SIDE_EFFECT_WEIGHTS)[0]
    tags = sorted({domain, noun, *rng.sample(TAG_VOCABULARY, rng.randint(0, 3))})
    regions = [] if rng.random() < 0.3 else sorted(rng.sample(REGIONS, rng.randint(1, 2)))
    major = rng.randint(1, 3)
    return {
        "id": skill_id,
        "name": f"{verb.capitalize()} {noun}",
        "description": f"{rng.choice(ADJECTIVES).capitalize()} {verb} of {noun} records for the {domain} team.",
        "tags": tags,
        "examples": [f"{verb} {noun} {rng.randint(1000, 9999)}"],
        "version": f"{major}.{round_}.0",
        "inputSchema": _object_schema(rng, 0, rng.randint(3, 10)),
        "outputSchema": _object_schema(rng, 0, rng.randint(3, 10)),
        "scopes": [f"{noun}:{'read' if effect == 'none' else 'write'}"],
        "sideEffect": effect,
        "dataRegions": regions,
        "slo": {"latencyP99Ms": rng.choice([200, 500, 800, 2000]), "availability": rng.choice([0.99, 0.999, 0.9999])},
    }


def agent(seed: int, index: int, round_: int = 0) -> AgentSpec:
    """Agent `index` of the data set; `round_` > 0 gives the same agent with every skill one minor
    version newer (the same schemas: a compatible new version)."""
    rng = _rng(seed, "agent", index)
    tenant = TENANTS[rng.randrange(len(TENANTS))]
    domain = rng.choice(sorted(DOMAINS))
    roll = rng.random()
    visibility, shared = (
        ("public", [])
        if roll < 0.6
        else ("tenant", [])
        if roll < 0.9
        else ("tenant", sorted(rng.sample([t for t in TENANTS if t != tenant], 2)))
    )
    used: set[str] = set()
    skills = [_skill(seed, index, k, domain, used, round_) for k in range(rng.randint(3, 5))]
    agent_id = f"{domain}-{rng.choice(ADJECTIVES)}-{index:06d}"
    card = {
        "name": f"{domain.capitalize()} agent {index}",
        "description": f"A {rng.choice(ADJECTIVES)} agent serving {domain} workflows for {tenant}.",
        "version": f"1.{round_}.0",
        "provider": {
            "organization": f"{tenant.capitalize()} {domain.capitalize()}",
            "url": f"https://{tenant}.example",
        },
        "supportedInterfaces": [
            {"url": f"https://{agent_id}.{tenant}.internal/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": rng.random() < 0.3},
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "visibility": visibility,
        "sharedWith": shared,
        "skills": skills,
    }
    return AgentSpec(tenant=tenant, agent_id=agent_id, card=card)


def agents(seed: int, count: int) -> list[AgentSpec]:
    return [agent(seed, i) for i in range(count)]
