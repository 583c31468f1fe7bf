"""Message content encoding: a prompt that extends the last one reuses its JSON, and is still exact."""

from __future__ import annotations

import json

from aegis_probe.capture.messages import SharedMessage, _encode_message, encode_messages
from aegis_probe.redact import redact_secrets


def reference(messages) -> str:
    """The documented encoding, message by message, with no caching at all."""
    return "[" + ", ".join(json.dumps(_encode_message(m, redact_secrets), ensure_ascii=False) for m in messages) + "]"


def test_growing_conversation_is_encoded_exactly_at_every_step():
    history = [SharedMessage(role="system", content="You are alice.")]
    for i in range(40):
        history.append(SharedMessage(role="user" if i % 2 else "assistant", content=f"turn {i} \u00e9 \"q\"", name="bob"))
        prompt = list(history)
        assert encode_messages(prompt, redact_secrets) == reference(prompt)
        assert encode_messages(prompt, redact_secrets) == reference(prompt), "the same prompt again"


def test_prompts_that_diverge_or_shrink_or_mix_in_plain_dicts_are_exact():
    base = [SharedMessage(role="user", content=f"m{i}") for i in range(12)]
    assert encode_messages(base, redact_secrets) == reference(base)
    edited = base[:5] + [SharedMessage(role="user", content="changed")] + base[6:]
    assert encode_messages(edited, redact_secrets) == reference(edited)
    shorter = base[:9]
    assert encode_messages(shorter, redact_secrets) == reference(shorter)
    plain_tail = base + [{"role": "tool", "content": "42", "tool_call_id": "c1"},
                         {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "name": "f", "arguments": "{}"}]}]
    assert encode_messages(plain_tail, redact_secrets) == reference(plain_tail)
    longer = base + [SharedMessage(role="user", content="sk-abcdefghijklmnopqrstuvwx")]
    assert encode_messages(longer, redact_secrets) == reference(longer) and "sk-abc" not in reference(longer)


def test_the_callers_list_changing_afterwards_changes_nothing():
    prompt = [SharedMessage(role="user", content=f"m{i}") for i in range(10)]
    first = encode_messages(prompt, redact_secrets)
    prompt[3] = SharedMessage(role="user", content="replaced in place")
    assert encode_messages(prompt, redact_secrets) == reference(prompt) != first


def test_another_redactor_never_sees_the_first_ones_json():
    prompt = [SharedMessage(role="user", content=f"Alice {i}") for i in range(10)]
    encode_messages(prompt, redact_secrets)

    def other(text: str) -> str:
        return text.replace("Alice", "<name>")

    assert "<name> 3" in encode_messages(prompt + [SharedMessage(role="user", content="x")], other)


def test_a_long_growing_single_message_prompt_is_encoded_exactly():
    """MetaGPT's prompt is one message holding the conversation so far: its JSON is built from the
    last one's, and stays exact with escapes at the seam, a secret appearing later, and another
    conversation interleaved."""
    text = "Conversation:\n" + "".join(f"alice: reply number {i}, all \"good\"\n" for i in range(400))
    other = "Other conversation:\n" + "x\t" * 5000
    for i in range(12):
        text += ["bob: \"q\"\\", "\n\u00e9\u0001", "tab\there", "api_key=hunter2hunter2 ", "ok\n"][i % 5]
        other += f"y{i}"
        for prompt in ([{"role": "user", "content": text}], [{"role": "user", "content": other}]):
            assert encode_messages(prompt, redact_secrets) == reference(prompt), i
    assert "hunter2" not in encode_messages([{"role": "user", "content": text}], redact_secrets)


def test_a_refusal_is_a_marked_text_part_redacted_like_content():
    refused = {"role": "assistant", "content": None, "refusal": "No: my key sk-proj-Ab12Cd34Ef56Gh78Ij90 stays mine.",
               "finish_reason": "stop"}
    both = {"role": "assistant", "content": "Partly.", "refusal": "Not the rest."}
    for message in (refused, SharedMessage(refused)):
        parts = json.loads(encode_messages([message], redact_secrets))[0]["parts"]
        assert parts == [{"type": "text", "content": "No: my key [REDACTED] stays mine.", "refusal": True}]
    assert json.loads(encode_messages([both], redact_secrets))[0]["parts"] == [
        {"type": "text", "content": "Partly."}, {"type": "text", "content": "Not the rest.", "refusal": True}]
    assert encode_messages([both], redact_secrets) == reference([both])


def test_an_answer_shares_its_messages_json_and_adds_its_finish_reason():
    """A model's answer read into an adapter's shared message (the step's output and the next
    prompt) is encoded once: the chat's output (``LLMResponse.as_message``, with its finish reason)
    is that message's JSON plus the finish reason, exactly as encoding it afresh gives; an answer an
    interceptor changed, or one that does not read as the shared message, is encoded on its own."""
    from aegis_probe.capture.interception import LLMResponse

    call = {"id": "c1", "name": "add", "arguments": '{"x": "sk-abcdefghijklmnopqrstuvwx"}'}
    for shared, response in [
        (SharedMessage(role="assistant", content="Done \u00e9 \"q\"."), LLMResponse(content="Done \u00e9 \"q\".", finish_reason="stop")),
        (SharedMessage(role="assistant", content="", tool_calls=[call]), LLMResponse(tool_calls=[dict(call)], finish_reason="tool_calls")),
        (SharedMessage(role="assistant", content="No reason."), LLMResponse(content="No reason.")),
    ]:
        response.message = shared
        answer = response.as_message()
        assert type(answer) is SharedMessage and answer is not shared
        assert answer.get("finish_reason") == response.finish_reason and answer["content"] == response.content
        assert encode_messages([answer], redact_secrets) == reference([answer])
        assert shared._fragment[1] == reference([shared])[1:-1]  # built once, on the shared message
        assert encode_messages([shared], redact_secrets) == reference([shared])
        assert "sk-abc" not in encode_messages([answer], redact_secrets)

        def other(text: str) -> str:
            return text.replace("Done", "<verb>")

        expected = "[" + ", ".join(json.dumps(_encode_message(m, other), ensure_ascii=False) for m in [answer]) + "]"
        assert encode_messages([answer], other) == expected  # another redactor: its own JSON
    named = LLMResponse(content="Hi.", finish_reason="stop", message=SharedMessage(role="assistant", content="Hi.", name="bob"))
    assert type(named.as_message()) is dict and "name" not in named.as_message()  # not the shared message: its own JSON
    injected = LLMResponse(content="Injected.", finish_reason="stop", message=SharedMessage(role="assistant", content="Real."))
    assert type(injected.as_message()) is dict and encode_messages([injected.as_message()], redact_secrets) == reference(
        [injected.as_message()])
