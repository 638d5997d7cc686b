"""llama.cpp's built-in chat template names (``--chat-template chatml``, ``llama3``, ...) as jinja2 sources.

llama-server accepts a template *name* where a template is expected; the
names are those of llama.cpp's ``LLM_CHAT_TEMPLATES`` table
(``src/llama-chat.cpp``), whose C++ ``llm_chat_apply_template`` formats
plain-text conversations. Each entry below writes the same text as that
function for string contents (system, user and assistant turns; the
generation prompt when ``add_generation_prompt``), so a name renders here as
it does in llama.cpp. Tool calls and reasoning need a model's full template
(its GGUF's, or a file).

Covered: the common families, not all of llama.cpp's names (:func:`llama_cpp_builtin_names`). An unknown
name is refused by :func:`builtin_template` with the list of known ones, saying whether llama.cpp has it.
"""

from __future__ import annotations

# A turn-by-turn loop over string contents; ``{{- ... }}`` keeps the text exact. ``trimmed`` is llama.cpp's
# trim(): C's isspace characters only (jinja's bare ``trim`` is Python's str.strip, which also strips U+00A0,
# U+001F and the other Unicode spaces).
_LOOP = ("{%- for message in messages %}{%- set content = message['content'] or '' %}"
         "{%- set trimmed = content | trim(' \\t\\n\\v\\f\\r') %}")

BUILTIN_TEMPLATES: dict[str, str] = {
    "chatml": (
        _LOOP + "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"),
    "llama2": (
        "{{- '[INST] ' }}{%- set ns = namespace(inside=true) %}" + _LOOP +
        "{%- if not ns.inside %}{%- set ns.inside = true %}{{- '[INST] ' }}{%- endif %}"
        "{%- if message['role'] == 'system' %}{{- content + '\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- content + ' [/INST]' }}"
        "{%- else %}{{- content + '</s>' }}{%- set ns.inside = false %}{%- endif %}{%- endfor %}"),
    "llama2-sys": (
        "{{- '[INST] ' }}{%- set ns = namespace(inside=true) %}" + _LOOP +
        "{%- if not ns.inside %}{%- set ns.inside = true %}{{- '[INST] ' }}{%- endif %}"
        "{%- if message['role'] == 'system' %}{{- '<<SYS>>\\n' + content + '\\n<</SYS>>\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- content + ' [/INST]' }}"
        "{%- else %}{{- content + '</s>' }}{%- set ns.inside = false %}{%- endif %}{%- endfor %}"),
    "mistral-v1": (
        "{%- set ns = namespace(inside=false) %}" + _LOOP +
        "{%- if not ns.inside %}{{- ' [INST] ' }}{%- set ns.inside = true %}{%- endif %}"
        "{%- if message['role'] == 'system' %}{{- content + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- content + ' [/INST]' }}"
        "{%- else %}{{- ' ' + content + '</s>' }}{%- set ns.inside = false %}{%- endif %}{%- endfor %}"),
    "mistral-v3": (
        "{%- set ns = namespace(inside=false) %}" + _LOOP +
        "{%- if not ns.inside %}{{- '[INST] ' }}{%- set ns.inside = true %}{%- endif %}"
        "{%- if message['role'] == 'system' %}{{- content + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- content + '[/INST]' }}"
        "{%- else %}{{- ' ' + trimmed + '</s>' }}{%- set ns.inside = false %}{%- endif %}{%- endfor %}"),
    "mistral-v3-tekken": (
        "{%- set ns = namespace(inside=false) %}" + _LOOP +
        "{%- if not ns.inside %}{{- '[INST]' }}{%- set ns.inside = true %}{%- endif %}"
        "{%- if message['role'] == 'system' %}{{- content + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- content + '[/INST]' }}"
        "{%- else %}{{- content + '</s>' }}{%- set ns.inside = false %}{%- endif %}{%- endfor %}"),
    "mistral-v7": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT] ' + content + '[/SYSTEM_PROMPT]' }}"
        "{%- elif message['role'] == 'user' %}{{- '[INST] ' + content + '[/INST]' }}"
        "{%- else %}{{- ' ' + content + '</s>' }}{%- endif %}{%- endfor %}"),
    "mistral-v7-tekken": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + content + '[/SYSTEM_PROMPT]' }}"
        "{%- elif message['role'] == 'user' %}{{- '[INST]' + content + '[/INST]' }}"
        "{%- else %}{{- content + '</s>' }}{%- endif %}{%- endfor %}"),
    "phi3": (
        _LOOP + "{{- '<|' + message['role'] + '|>\\n' + content + '<|end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"),
    "phi4": (
        _LOOP + "{{- '<|im_start|>' + message['role'] + '<|im_sep|>' + content + '<|im_end|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant<|im_sep|>' }}{%- endif %}"),
    "falcon3": (
        _LOOP + "{{- '<|' + message['role'] + '|>\\n' + content + '\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"),
    "zephyr": (
        _LOOP + "{{- '<|' + message['role'] + '|>\\n' + content + '<|endoftext|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"),
    "gemma": (
        "{%- set ns = namespace(system='') %}" + _LOOP +
        "{%- if message['role'] == 'system' %}{%- set ns.system = ns.system + trimmed %}{%- else %}"
        "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "{{- '<start_of_turn>' + role + '\\n' }}"
        "{%- if ns.system and role != 'model' %}{{- ns.system + '\\n\\n' }}{%- set ns.system = '' %}{%- endif %}"
        "{{- trimmed + '<end_of_turn>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"),
    "openchat": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- content + '<|end_of_turn|>' }}"
        "{%- else %}{{- 'GPT4 Correct ' + message['role'][:1] | upper + message['role'][1:] + ': ' + content"
        " + '<|end_of_turn|>' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- 'GPT4 Correct Assistant:' }}{%- endif %}"),
    "vicuna": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- content + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- 'USER: ' + content + '\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- 'ASSISTANT: ' + content + '</s>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- 'ASSISTANT:' }}{%- endif %}"),
    "vicuna-orca": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- 'SYSTEM: ' + content + '\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- 'USER: ' + content + '\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- 'ASSISTANT: ' + content + '</s>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- 'ASSISTANT:' }}{%- endif %}"),
    "deepseek": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- content }}"
        "{%- elif message['role'] == 'user' %}{{- '### Instruction:\\n' + content + '\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- '### Response:\\n' + content + '\\n<|EOT|>\\n' }}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '### Response:\\n' }}{%- endif %}"),
    "deepseek2": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- content + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- 'User: ' + content + '\\n\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- 'Assistant: ' + content + '<｜end▁of▁sentence｜>' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}"),
    "deepseek3": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- content + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- '<｜User｜>' + content }}"
        "{%- elif message['role'] == 'assistant' %}{{- '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<｜Assistant｜>' }}{%- endif %}"),
    "command-r": (
        _LOOP + "{%- set token = {'system': 'SYSTEM', 'user': 'USER', 'assistant': 'CHATBOT'}.get(message['role']) %}"
        "{%- if token %}{{- '<|START_OF_TURN_TOKEN|><|' + token + '_TOKEN|>' + trimmed"
        " + '<|END_OF_TURN_TOKEN|>' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{%- endif %}"),
    "llama3": (
        _LOOP + "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + trimmed"
        " + '<|eot_id|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
    "llama4": (
        _LOOP + "{{- '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' + trimmed"
        " + '<|eot|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|header_start|>assistant<|header_end|>\\n\\n' }}{%- endif %}"),
    "chatglm4": (
        "{{- '[gMASK]<sop>' }}" + _LOOP + "{{- '<|' + message['role'] + '|>\\n' + content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"),
    "exaone3": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- '[|system|]' + trimmed + '[|endofturn|]\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- '[|user|]' + trimmed + '\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- '[|assistant|]' + trimmed + '[|endofturn|]\\n' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '[|assistant|]' }}{%- endif %}"),
    "granite": (
        _LOOP + "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' }}"
        "{%- if message['role'] == 'assistant_tool_call' %}{{- '<|tool_call|>' }}{%- endif %}"
        "{{- content + '<|end_of_text|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"),
    "gpt-oss": (
        _LOOP + "{{- '<|start|>' + message['role'] + '<|message|>' + content }}"
        "{{- '<|return|>' if message['role'] == 'assistant' else '<|end|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"),
}


def builtin_template(name: str) -> str:
    """The jinja2 source of llama.cpp's built-in template ``name``.

    Raises ``KeyError`` (its message lists the known names) for an unknown name.
    """
    try:
        return BUILTIN_TEMPLATES[name]
    except KeyError:
        pass
    known = ", ".join(sorted(BUILTIN_TEMPLATES))
    if name in llama_cpp_builtin_names():
        raise KeyError(f"{name!r} is one of llama.cpp's built-in chat templates, but not one skippy renders ({known}); "
                       "give the model's own template file (its GGUF's: skippy show MODEL prints it)") from None
    raise KeyError(f"{name!r} is neither a file nor a built-in chat template name ({known})") from None


def llama_cpp_builtin_names() -> frozenset[str]:
    """The names of the built-in chat templates of the llama.cpp that llama-cpp-python loaded
    (``llama_chat_builtin_templates``); empty where it cannot say."""
    import ctypes

    try:
        import llama_cpp

        n = llama_cpp.llama_chat_builtin_templates(None, 0)
        names = (ctypes.c_char_p * n)()
        llama_cpp.llama_chat_builtin_templates(names, n)
        return frozenset(name.decode() for name in names if name)
    except (ImportError, AttributeError, OSError, ctypes.ArgumentError):
        return frozenset()
