"""llama.cpp's built-in chat template names (``--chat-template chatml``, ``llama3``, ...) as jinja2 sources.

llama-server accepts a template *name* where a template is expected; the
names are those of llama.cpp's ``LLM_CHAT_TEMPLATES`` table
(``src/llama-chat.cpp``), whose C++ ``llm_chat_apply_template`` formats
plain-text conversations. Each entry below writes the same text as that
function for string contents (system, user and assistant turns; the
generation prompt when ``add_generation_prompt``), so a name renders here as
it does in llama.cpp. Tool calls and reasoning need a model's full template
(its GGUF's, or a file).

Covered: all 54 names of the llama.cpp that llama-cpp-python loads (:func:`llama_cpp_builtin_names`), each
checked against llama.cpp's own rendering (``llama_chat_apply_template``) by
``tests/unit/test_llama_server_templates.py``; some write no generation prompt (``hunyuan-*``, ``orion``,
``minicpm``, ``deepseek-ocr``, ``rwkv-world``), some drop a role they do not know, as llama.cpp does. An
unknown name is refused by :func:`builtin_template` with the list of known ones, saying whether llama.cpp
has it (a name of a newer llama.cpp).
"""

from __future__ import annotations

# A turn-by-turn loop over string contents; ``{{- ... }}`` keeps the text exact. ``trimmed`` is llama.cpp's
# trim(): C's isspace characters only (jinja's bare ``trim`` is Python's str.strip, which also strips U+00A0,
# U+001F and the other Unicode spaces).
_LOOP = ("{%- for message in messages %}{%- set content = message['content'] or '' %}"
         "{%- set trimmed = content | trim(' \\t\\n\\v\\f\\r') %}")
# llama.cpp's Bailing templates: the role upper-cased, ``user`` as HUMAN.
_BAILING_ROLE = "'<role>' + ('HUMAN' if message['role'] == 'user' else message['role'] | upper) + '</role>'"

# Granite 4.0 and 4.1: an assistant_tool_call turn is an assistant turn opening with <|tool_call|>.
_GRANITE_4 = (
    _LOOP + "{%- set tool_call = message['role'] == 'assistant_tool_call' %}"
    "{{- '<|start_of_role|>' + ('assistant' if tool_call else message['role']) + '<|end_of_role|>' }}"
    "{{- ('<|tool_call|>' if tool_call else '') + content + '<|end_of_text|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}")

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
    "llama2-sys-bos": (
        "{{- '[INST] ' }}{%- set ns = namespace(inside=true) %}" + _LOOP +
        "{%- if not ns.inside %}{%- set ns.inside = true %}{{- '<s>[INST] ' }}{%- endif %}"
        "{%- if message['role'] == 'system' %}{{- '<<SYS>>\\n' + content + '\\n<</SYS>>\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- content + ' [/INST]' }}"
        "{%- else %}{{- content + '</s>' }}{%- set ns.inside = false %}{%- endif %}{%- endfor %}"),
    "llama2-sys-strip": (
        "{{- '[INST] ' }}{%- set ns = namespace(inside=true) %}" + _LOOP +
        "{%- if not ns.inside %}{%- set ns.inside = true %}{{- '[INST] ' }}{%- endif %}"
        "{%- if message['role'] == 'system' %}{{- '<<SYS>>\\n' + trimmed + '\\n<</SYS>>\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- trimmed + ' [/INST]' }}"
        "{%- else %}{{- trimmed + '</s>' }}{%- set ns.inside = false %}{%- endif %}{%- endfor %}"),
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
    "monarch": (
        _LOOP + "{{- ('' if loop.first else '<s>') + message['role'] + '\\n' + content + '</s>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<s>assistant\\n' }}{%- endif %}"),
    "gemma": (
        "{%- set ns = namespace(system='') %}" + _LOOP +
        "{%- if message['role'] == 'system' %}{%- set ns.system = ns.system + trimmed %}{%- else %}"
        "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
        "{{- '<start_of_turn>' + role + '\\n' }}"
        "{%- if ns.system and role != 'model' %}{{- ns.system + '\\n\\n' }}{%- set ns.system = '' %}{%- endif %}"
        "{{- trimmed + '<end_of_turn>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"),
    "orion": (
        "{%- set ns = namespace(system='') %}" + _LOOP +
        "{%- if message['role'] == 'system' %}{%- set ns.system = ns.system + content %}"
        "{%- elif message['role'] == 'user' %}{{- 'Human: ' }}"
        "{%- if ns.system %}{{- ns.system + '\\n\\n' }}{%- set ns.system = '' %}{%- endif %}"
        "{{- content + '\\n\\nAssistant: </s>' }}"
        "{%- else %}{{- content + '</s>' }}{%- endif %}{%- endfor %}"),
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
    "smolvlm": (
        "{{- '<|im_start|>' }}" + _LOOP + "{%- if message['role'] == 'system' %}{{- content + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- 'User: ' + content + '<end_of_utterance>\\n' }}"
        "{%- else %}{{- 'Assistant: ' + content + '<end_of_utterance>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}"),
    "hunyuan-moe": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- '<|startoftext|>' + content + '<|extra_4|>' }}"
        "{%- elif message['role'] == 'assistant' %}{{- content + '<|eos|>' }}"
        "{%- else %}{{- '<|startoftext|>' + content + '<|extra_0|>' }}{%- endif %}{%- endfor %}"),
    "hunyuan-dense": (
        _LOOP + "{%- if loop.first and message['role'] == 'system' %}{{- content + '<｜hy_place▁holder▁no▁3｜>' }}"
        "{%- elif message['role'] == 'assistant' %}{{- '<｜hy_Assistant｜>' + content + '<｜hy_place▁holder▁no▁2｜>' }}"
        "{%- elif message['role'] == 'user' %}{{- '<｜hy_User｜>' + content + '<｜hy_Assistant｜>' }}"
        "{%- endif %}{%- endfor %}"),
    "hunyuan-vl": (
        "{{- '<｜hy_begin▁of▁sentence｜>' }}" + _LOOP +
        "{%- if loop.first and message['role'] == 'system' %}{{- content + '<｜hy_place▁holder▁no▁3｜>' }}"
        "{%- elif message['role'] == 'user' %}{{- content + '<｜hy_User｜>' }}"
        "{%- elif message['role'] == 'assistant' %}{{- content + '<｜hy_Assistant｜>' }}{%- endif %}{%- endfor %}"),
    "chatglm3": (
        "{{- '[gMASK]sop' }}" + _LOOP + "{{- '<|' + message['role'] + '|>\\n ' + content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}"),
    "chatglm4": (
        "{{- '[gMASK]<sop>' }}" + _LOOP + "{{- '<|' + message['role'] + '|>\\n' + content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"),
    "glmedge": (
        _LOOP + "{{- '<|' + message['role'] + '|>\\n' + content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}"),
    "minicpm": (
        _LOOP + "{%- if message['role'] == 'user' %}{{- '<用户>' + trimmed + '<AI>' }}"
        "{%- else %}{{- trimmed }}{%- endif %}{%- endfor %}"),
    "exaone3": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- '[|system|]' + trimmed + '[|endofturn|]\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- '[|user|]' + trimmed + '\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- '[|assistant|]' + trimmed + '[|endofturn|]\\n' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '[|assistant|]' }}{%- endif %}"),
    "exaone4": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- '[|system|]' + trimmed + '[|endofturn|]\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- '[|user|]' + trimmed + '\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- '[|assistant|]' + trimmed + '[|endofturn|]\\n' }}"
        "{%- elif message['role'] == 'tool' %}{{- '[|tool|]' + trimmed + '[|endofturn|]\\n' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '[|assistant|]' }}{%- endif %}"),
    "exaone-moe": (
        _LOOP + "{%- if message['role'] in ('system', 'user', 'assistant', 'tool') %}"
        "{{- '<|' + message['role'] + '|>\\n' + trimmed + '<|endofturn|>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"),
    "rwkv-world": (  # no generation prompt of its own: a last user turn is followed by 'Assistant:'
        _LOOP + "{%- if message['role'] == 'system' %}{{- 'System: ' + trimmed + '\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- 'User: ' + trimmed + '\\n\\n' }}"
        "{%- if loop.last %}{{- 'Assistant:' }}{%- endif %}"
        "{%- elif message['role'] == 'assistant' %}{{- 'Assistant: ' + trimmed + '\\n\\n' }}"
        "{%- endif %}{%- endfor %}"),
    "granite": (
        _LOOP + "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' }}"
        "{%- if message['role'] == 'assistant_tool_call' %}{{- '<|tool_call|>' }}{%- endif %}"
        "{{- content + '<|end_of_text|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"),
    "granite-4.0": _GRANITE_4,
    "granite-4.1": _GRANITE_4,
    "gigachat": (
        "{%- set has_system = messages and messages[0]['role'] == 'system' %}{{- '<s>' }}" + _LOOP +
        "{%- if loop.first and has_system %}{{- content + '<|message_sep|>' }}"
        "{%- elif message['role'] == 'user' %}{{- 'user<|role_sep|>' + content + '<|message_sep|>'"
        " + 'available functions<|role_sep|>[]<|message_sep|>' }}"
        "{%- elif message['role'] == 'assistant' %}{{- 'assistant<|role_sep|>' + content + '<|message_sep|>' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- 'assistant<|role_sep|>' }}{%- endif %}"),
    "megrez": (
        _LOOP + "{{- '<|role_start|>' + message['role'] + '<|role_end|>' + content + '<|turn_end|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|role_start|>assistant<|role_end|>' }}{%- endif %}"),
    "yandex": (
        _LOOP + "{%- if message['role'] == 'user' %}{{- ' Пользователь: ' + content + '\\n\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- ' Ассистент: ' + content + '\\n\\n' }}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- ' Ассистент:[SEP]' }}{%- endif %}"),
    "bailing": (
        _LOOP + "{{- " + _BAILING_ROLE + " + content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<role>ASSISTANT</role>' }}{%- endif %}"),
    "bailing-think": (
        _LOOP + "{{- " + _BAILING_ROLE + " + content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<role>ASSISTANT</role><think>' }}{%- endif %}"),
    "bailing2": (
        "{%- if not messages or messages[0]['role'] != 'system' %}"
        "{{- '<role>SYSTEM</role>detailed thinking off<|role_end|>' }}{%- endif %}"
        + _LOOP + "{{- " + _BAILING_ROLE + " + content + '<|role_end|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<role>ASSISTANT</role>' }}{%- endif %}"),
    "gpt-oss": (
        _LOOP + "{{- '<|start|>' + message['role'] + '<|message|>' + content }}"
        "{{- '<|return|>' if message['role'] == 'assistant' else '<|end|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"),
    "kimi-k2": (
        _LOOP + "{%- set header = {'system': '<|im_system|>system', 'user': '<|im_user|>user',"
        " 'assistant': '<|im_assistant|>assistant', 'tool': '<|im_system|>tool'}.get(message['role']) %}"
        "{%- if header %}{{- header + '<|im_middle|>' }}{%- endif %}{{- content + '<|im_end|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_assistant|>assistant<|im_middle|>' }}{%- endif %}"),
    "seed_oss": (
        _LOOP + "{{- '<seed:bos>' + message['role'] + '\\n' }}"
        "{{- (trimmed if message['role'] == 'assistant' else content) + '<seed:eos>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<seed:bos>assistant\\n' }}{%- endif %}"),
    "grok-2": (
        _LOOP + "{%- if message['role'] == 'system' %}{{- 'System: ' + trimmed + '<|separator|>\\n\\n' }}"
        "{%- elif message['role'] == 'user' %}{{- 'Human: ' + trimmed + '<|separator|>\\n\\n' }}"
        "{%- elif message['role'] == 'assistant' %}{{- 'Assistant: ' + content + '<|separator|>\\n\\n' }}"
        "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}"),
    "pangu-embedded": (
        _LOOP + "{%- if loop.first and message['role'] != 'system' %}{{- '[unused9]系统：[unused10]' }}{%- endif %}"
        "{%- set name = {'system': '系统', 'user': '用户', 'assistant': '助手', 'tool': '工具',"
        " 'function': '方法'}.get(message['role']) %}"
        "{%- if name %}{{- '[unused9]' + name + '：' + content + '[unused10]' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '[unused9]助手：' }}{%- endif %}"),
    "solar-open": (
        _LOOP + "{{- '<|begin|>' + message['role'] + '<|content|>' + content + '<|end|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|begin|>assistant' }}{%- endif %}"),
    "deepseek-ocr": _LOOP + "{{- content }}{%- endfor %}",  # the contents alone, no roles, no generation prompt
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
