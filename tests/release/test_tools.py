"""OpenAI and MCP tool definitions of a capability version."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from mcp.types import Tool

from registry.agents.cards import mcp_tool, openai_function_name, openai_tool
from registry.core.records import SKILL_ID_PATTERN, CapabilityVersion

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MCP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

INPUT_SCHEMA = {
    "type": "object",
    "properties": {"invoiceId": {"type": "string"}, "includeLines": {"type": "boolean", "default": False}},
    "required": ["invoiceId"],
}
OUTPUT_SCHEMA = {"type": "object", "properties": {"status": {"type": "string"}}}

skill_ids = st.from_regex(SKILL_ID_PATTERN, fullmatch=True).filter(lambda s: len(s) <= 128)


def capability(**changes: object) -> CapabilityVersion:
    cap = CapabilityVersion(
        tenant="acme",
        agent_id="billing-agent",
        id="invoice.lookup",
        version="2.0.0",
        name="Look up an invoice",
        description="Returns one invoice.",
        tags=["finance"],
        scopes=["invoice:read"],
        side_effect="none",
        requires_approval=False,
        data_regions=["eu"],
        slo=None,
        examples=[],
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        input_modes=[],
        output_modes=[],
        status="active",
        sunset_at=None,
        deprecation_message=None,
        effective_at=None,
        published_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return msgspec.structs.replace(cap, **changes)


def test_openai_tool_shape() -> None:
    assert openai_tool(capability()) == {
        "type": "function",
        "function": {
            "name": "invoice_lookup",
            "description": "Returns one invoice.",
            "parameters": INPUT_SCHEMA,
            "strict": False,
        },
    }


@given(skill_ids)
def test_openai_name_is_valid_for_any_skill_id(skill_id: str) -> None:
    assert OPENAI_NAME.match(openai_tool(capability(id=skill_id))["function"]["name"])


def test_long_ids_sharing_a_prefix_get_distinct_names() -> None:
    prefix = "a" * 100
    first, second = openai_function_name(prefix + ".x"), openai_function_name(prefix + ".y")
    assert first != second
    assert len(first) == len(second) == 64
    assert OPENAI_NAME.match(first) and OPENAI_NAME.match(second)


def test_mcp_tool_validates_with_the_mcp_sdk() -> None:
    tool = Tool.model_validate(mcp_tool(capability()))
    assert tool.name == "invoice.lookup"
    assert tool.title == "Look up an invoice"
    assert tool.input_schema == INPUT_SCHEMA
    assert tool.output_schema == OUTPUT_SCHEMA
    assert tool.annotations is not None and tool.annotations.read_only_hint is True


@given(skill_ids)
def test_mcp_tool_name_is_the_skill_id(skill_id: str) -> None:
    tool = Tool.model_validate(mcp_tool(capability(id=skill_id)))
    assert tool.name == skill_id and MCP_NAME.match(tool.name)


def test_mcp_tool_omits_output_schemas_that_are_not_objects() -> None:
    for output_schema in ({}, {"type": "string"}, {"type": "array", "items": {"type": "string"}}):
        tool = mcp_tool(capability(output_schema=output_schema))
        assert "outputSchema" not in tool
        assert Tool.model_validate(tool).output_schema is None


def test_mcp_annotations_follow_the_side_effect() -> None:
    destructive = Tool.model_validate(mcp_tool(capability(side_effect="destructive"))).annotations
    assert destructive is not None
    assert (destructive.read_only_hint, destructive.destructive_hint) == (False, True)
    idempotent = Tool.model_validate(mcp_tool(capability(side_effect="idempotent"))).annotations
    assert idempotent is not None
    assert (idempotent.destructive_hint, idempotent.idempotent_hint) == (False, True)


def test_tools_give_an_implicit_object_schema_its_type() -> None:
    cap = capability(input_schema={"properties": {"q": {"type": "string"}}})
    assert openai_tool(cap)["function"]["parameters"]["type"] == "object"
    assert Tool.model_validate(mcp_tool(cap)).input_schema["type"] == "object"
