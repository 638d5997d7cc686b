"""llama.cpp's own chat-parser tests as an oracle for our chat formats.

Every ``peg_tester`` case of ``tests/test-chat.cpp`` in the llama.cpp that llama-cpp-python 0.3.36
vendors (the model output, the template, the request's options and the message llama.cpp parses it
into) runs here through our pipeline: the fixture template is probed (:func:`~skippy.engine.chat.
capabilities.detect_caps`), the request rendered (:func:`~skippy.engine.chat.prepare.render_chat`:
it decides the format, thinking forced open, tools native or emulated) and the output parsed by
:func:`~skippy.engine.chat.prepare.make_output_parser`, whole and split at every character (the
streamed deltas must add up to the whole result). The comparison is llama.cpp's: content and
reasoning stripped of surrounding whitespace, tool calls by name and arguments as parsed JSON (ids
only where llama.cpp's are the model's own, Kimi K2's ``functions.NAME:IDX``).

The options are llama.cpp's test defaults, which are not llama-server's: ``reasoning_format`` is
``none`` unless the case sets one (llama-server's default is ``auto``), ``parallel_tool_calls`` false
unless set, ``enable_thinking`` true. A continued assistant message (llama.cpp's ``continue_final_message``)
is our prefill: a continued content is not in our reply, which holds only the continuation, so the prefill's
own text (content, and the reasoning before it) is taken off the expected message; a continued reasoning
begins our reply's ``reasoning_content``, as llama.cpp's (see ``render_chat``). ``is_partial`` cases compare
what was streamed before the end.

Regenerate ``CASES`` from a newer test-chat.cpp by extracting each ``tst.test(...)...run();`` chain
(the template, ``.tools``, ``.reasoning_format``, ``.enable_thinking``, ``.parallel_tool_calls``,
``.tool_choice``, ``.json_schema``, ``.messages``, ``.continue_final_message`` where it is not the part
llama.cpp's ``AUTO`` picks, ``.is_partial`` and the expectations); the number
is the case's line in test-chat.cpp. Cases where we differ on purpose, or that llama.cpp parses for
families we do not support natively, are in ``DIFFERENCES`` with the reason (strict xfail: a case
that starts agreeing must leave the list).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
import pytest

from skippy.engine.chat.prepare import PreparedTemplate, make_output_parser, render_chat
from skippy.engine.protocols.openai.types import ChatCompletionRequest, JsonSchemaFormat, Message, ResponseFormat
from tests.support import check_invariant, fixture_template


@attrs.frozen
class Case:
    """One llama.cpp parse case: ``line`` in test-chat.cpp, the ``stems`` of the templates it runs on,
    the model's output ``text`` and the message llama.cpp expects."""

    line: int
    stems: tuple[str, ...]
    text: str
    content: str = ""
    reasoning: str = ""
    #: (name, arguments JSON[, id]) per expected call
    calls: list[tuple[str, ...]] = attrs.field(factory=list)
    tools: tuple[str, ...] = ()
    reasoning_format: str = "none"
    enable_thinking: bool = True
    parallel: bool = False
    tool_choice: str | None = None
    json_schema: dict[str, Any] | None = None
    partial: bool = False
    #: the conversation before the output: one user message, or one of :data:`HISTORIES`
    history: str | None = None
    #: ``continue_final_message`` (``"content"`` or ``"reasoning_content"``) where the case names a part
    continuation: str | None = None


TOOL_PARAMS: dict[str, dict[str, Any]] = {
    'special_function': {'type': 'object',
                         'properties': {'arg1': {'type': 'integer', 'description': 'The arg.'}},
                         'required': ['arg1']},
    'get_time': {'type': 'object',
                 'properties': {'city': {'type': 'string', 'description': 'City name'}},
                 'required': ['city']},
    'toggle': {'type': 'object',
               'properties': {'enabled': {'type': 'boolean',
                                          'description': 'Whether to enable the feature'}},
               'required': ['enabled']},
    'set_nullable': {'type': 'object',
                     'properties': {'value': {'type': 'null', 'description': 'A null value'}},
                     'required': ['value']},
    'set_config': {'type': 'object',
                   'properties': {'config': {'type': 'object', 'description': 'Configuration dict'}},
                   'required': ['config']},
    'Calendar.create_event': {'type': 'object',
                              'properties': {'title': {'type': 'string'},
                                             'participants': {'type': 'array', 'items': {'type': 'string'}},
                                             'metadata': {'type': 'object'}},
                              'required': ['title', 'participants', 'metadata']},
    'python': {'type': 'object',
               'properties': {'code': {'type': 'string', 'description': 'Python code to execute.'}},
               'required': ['code']},
    'special_function_with_opt': {'type': 'object',
                                  'properties': {'arg1': {'type': 'integer', 'description': 'The arg.'},
                                                 'arg2': {'type': 'integer',
                                                          'description': 'The optional arg.'}},
                                  'required': ['arg1']},
    'empty_args': {'type': 'object', 'properties': {}},
    'edit': {'type': 'object',
             'properties': {'filename': {'type': 'string', 'description': 'Path of file to edit'},
                            'oldString': {'type': 'string', 'description': 'Old string to replace.'},
                            'newString': {'type': 'string', 'description': 'New replacement string.'},
                            'replaceAll': {'type': 'boolean',
                                           'description': 'Whether to replace all occurrences.'}},
             'required': ['filename', 'oldString', 'newString']},
    'run_in_terminal': {'type': 'object',
                        'properties': {'command': {'type': 'string',
                                                   'description': 'Shell command to run'}},
                        'required': ['command']},
    'empty_args_no_props': {'type': 'object'},
    'manage_todo_list': {'type': 'object',
                         'properties': {'todos': {'type': 'array',
                                                  'description': 'List of TODO list items'}},
                         'required': ['todos']},
    'todo_list': {'type': 'object',
                  'properties': {'todos': {'type': 'array', 'description': 'List of TODO list items'}},
                  'required': ['todos']},
    'get_weather': {'type': 'object',
                    'properties': {'city': {'type': 'string', 'description': 'City name'}},
                    'required': ['city']},
    'amount': {'type': 'object', 'properties': {'orig': {'type': 'number'}}, 'required': ['orig']},
    'html': {'type': 'object',
             'properties': {'markup': {'type': 'string', 'description': 'HTML markup to validate.'}},
             'required': ['markup']},
    'tool_2req_4opt': {'type': 'object',
                       'properties': {'req1': {'type': 'string', 'description': 'Required string'},
                                      'req2': {'type': 'integer', 'description': 'Required int'},
                                      'opt1': {'type': 'string', 'description': 'Optional string 1'},
                                      'opt2': {'type': 'integer', 'description': 'Optional int 1'},
                                      'opt3': {'type': 'string', 'description': 'Optional string 2'},
                                      'opt4': {'type': 'integer', 'description': 'Optional int 2'}},
                       'required': ['req1', 'req2']},
    'tool_2req_5opt': {'type': 'object',
                       'properties': {'req1': {'type': 'string', 'description': 'Required string'},
                                      'req2': {'type': 'integer', 'description': 'Required int'},
                                      'opt1': {'type': 'string', 'description': 'Optional string 1'},
                                      'opt2': {'type': 'integer', 'description': 'Optional int 1'},
                                      'opt3': {'type': 'string', 'description': 'Optional string 2'},
                                      'opt4': {'type': 'integer', 'description': 'Optional int 2'},
                                      'opt5': {'type': 'string', 'description': 'Optional string 3'}},
                       'required': ['req1', 'req2']},
    'set_nullable_str': {'type': 'object',
                         'properties': {'name': {'type': ['string', 'null'],
                                                 'description': 'A nullable string'}},
                         'required': ['name']},
    'set_nullable_str_nf': {'type': 'object',
                            'properties': {'name': {'type': ['null', 'string'],
                                                    'description': 'A nullable string with null first'}},
                            'required': ['name']},
    'set_nullable_int': {'type': 'object',
                         'properties': {'count': {'type': ['integer', 'null'],
                                                  'description': 'A nullable integer'}},
                         'required': ['count']},
    'set_union': {'type': 'object',
                  'properties': {'value': {'type': ['string', 'object'],
                                           'description': 'A string or object value'},
                                 'amount': {'type': ['string', 'integer'],
                                            'description': 'A string or integer value'}},
                  'required': ['value', 'amount']},
    'set_unit': {'type': 'object',
                 'properties': {'unit': {'enum': ['celsius', 'fahrenheit'],
                                         'description': 'Temperature unit'}},
                 'required': ['unit']},
    'magic_int': {'type': 'object',
                  'properties': {'ref': {'type': 'integer'}, 'name': {'type': 'string'}},
                  'required': ['ref']},
    'read_file_diff_md': {'type': 'object',
                          'properties': {'review_id': {'type': 'string'}, 'file_id': {'type': 'string'}}},
    'nested_args': {'type': 'object',
                    'properties': {'tags': {'type': 'array', 'items': {'type': 'string'}},
                                   'entries': {'type': 'array',
                                               'items': {'type': 'object',
                                                         'properties': {'id': {'type': 'integer'},
                                                                        'label': {'type': 'string'}},
                                                         'required': ['id', 'label']}}},
                    'required': ['tags', 'entries']},
    'execute_command': {'type': 'object',
                        'properties': {'command': {'type': 'string',
                                                   'description': 'Shell command to execute'},
                                       'cwd': {'type': 'string', 'description': 'Working directory'},
                                       'timeout': {'type': 'integer',
                                                   'description': 'The timeout in seconds'}},
                        'required': ['command']},
    'empty_args_no_schema': {},
    'imaginary_number': {'type': 'object',
                         'properties': {'number': {'type': 'object',
                                                   'properties': {'real': {'type': 'number'},
                                                                  'imaginary': {'type': 'number'}},
                                                   'required': ['real', 'imaginary']}},
                         'required': ['number']},
    'union_args': {'type': 'object',
                   'properties': {'filter': {'anyOf': [{'type': 'array', 'items': {'type': 'string'}},
                                                       {'type': 'object',
                                                        'properties': {'field': {'type': 'string'},
                                                                       'op': {'type': 'string'}},
                                                        'required': ['field', 'op']}]},
                                  'label': {'oneOf': [{'type': 'string'},
                                                      {'type': 'object',
                                                       'properties': {'text': {'type': 'string'}}}]},
                                  'limit': {'oneOf': [{'type': 'integer'},
                                                      {'type': 'object',
                                                       'properties': {'max': {'type': 'integer'}},
                                                       'required': ['max']}]}}},
    'magic': {'type': 'object',
              'properties': {'name': {'type': 'string'}, 'ref': {'type': 'string'}},
              'required': ['name', 'ref']},
    'string_param': {'type': 'object',
                     'properties': {'text': {'type': 'string', 'description': 'A text parameter'}},
                     'required': []},
    'quoted_unquoted': {'type': 'object',
                        'properties': {'quoted': {'type': 'string', 'description': 'Quoted value'},
                                       'unquoted': {'type': 'string', 'description': 'Unquoted value'}},
                        'required': ['quoted', 'unquoted']},
}

CASES = [
    Case(2019, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(2022, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[special_function(arg1=1)]<|tool_call_end|>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(2028, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[get_time(city="XYZCITY")]<|tool_call_end|>',
         calls=[('get_time', '{"city":"XYZCITY"}')], tools=('get_time',)),
    Case(2034, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[toggle(enabled=True)]<|tool_call_end|>',
         calls=[('toggle', '{"enabled": true}')], tools=('toggle',)),
    Case(2039, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[set_nullable(value=None)]<|tool_call_end|>',
         calls=[('set_nullable', '{"value": null}')], tools=('set_nullable',)),
    Case(2045, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[set_config(config={"enabled": True, "count": 3})]<|tool_call_end|>',
         calls=[('set_config', '{"config": {"enabled": true, "count": 3}}')], tools=('set_config',)),
    Case(2051, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[set_config(config={"enabled": true, "note": null})]<|tool_call_end|>',
         calls=[('set_config', '{"config": {"enabled": true, "note": null}}')], tools=('set_config',)),
    Case(2057, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         ('<|tool_call_start|>[Calendar.create_event(title="demo", participants=["Alice", "Bob"], metadata={"pri'
          'ority": "high", "reminder": true})]<|tool_call_end|>'),
         calls=[
              ('Calendar.create_event', ('{"title": "demo", "participants": ["Alice", "Bob"], "metadata": {"prio'
                                         'rity": "high", "reminder": true}}'))],
         tools=('Calendar.create_event',)),
    Case(2066, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         'Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org).',
         content='Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org).',
         tools=('get_time',)),
    Case(2073, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[python(code="def hello():\\n    print(\'hey\')")]<|tool_call_end|>',
         calls=[('python', '{"code": "def hello():\\n    print(\'hey\')"}')], tools=('python',)),
    Case(2082, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[python(code="First line\\nSecond line\\tindented")]<|tool_call_end|>',
         calls=[('python', '{"code": "First line\\nSecond line\\tindented"}')], tools=('python',)),
    Case(2090, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[python(code="print(\\"hi\\")")]<|tool_call_end|>',
         calls=[('python', '{"code": "print(\\"hi\\")"}')], tools=('python',)),
    Case(2098, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         'Let me check the time.<|tool_call_start|>[get_time(city="Paris")]<|tool_call_end|>',
         content='Let me check the time.', calls=[('get_time', '{"city":"Paris"}')], tools=('get_time',)),
    Case(2106, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         ('<|tool_call_start|>[special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)]<|tool_call_e'
          'nd|>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), parallel=True),
    Case(2116, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[special_function(arg1=',
         calls=[('special_function', '{"arg1": ')], tools=('special_function',), partial=True),
    Case(2123, ('LFM2-8B-A1B', 'LFM2.5-Instruct', 'LFM2.5-8B-A1B'),
         '<|tool_call_start|>[empty_args()]<|tool_call_end|>',
         calls=[('empty_args', '{}')], tools=('empty_args',)),
    Case(2150, ('Qwen3.5-4B',),
         "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto',
         enable_thinking=True),
    Case(2156, ('Qwen3.5-4B',),
         "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
         content="<think>\nI'm\nthinking\n</think>\n\nHello, world!\nWhat's up?", reasoning_format='none',
         enable_thinking=True),
    Case(2162, ('Qwen3.5-4B',),
         ('<tool_call>\n<function=special_function>\n<parameter=arg1>\n'
          '1\n</parameter>\n</function>\n</tool_call>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto',
         enable_thinking=False),
    Case(2174, ('Qwen3.5-4B',),
         ("I'm\nthinking\n</think>\n\n<tool_call>\n<function=special_function>\n"
          '<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto'),
    Case(2186, ('Qwen3.5-4B',),
         ('<tool_call>\n<function=special_function>\n<parameter=arg1>\n'
          '1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n'
          '<function=special_function_with_opt>\n<parameter=arg1>\n'
          '1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n'
          '</function>\n</tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), reasoning_format='auto',
         enable_thinking=False, parallel=True),
    Case(2210, ('Qwen3.5-4B',),
         ('<tool_call>\n<function=python>\n<parameter=code>\n'
          'def hello():\n    print("Hello, world!")\n\nhello()\n'
          '</parameter>\n</function>\n</tool_call>'),
         calls=[('python', '{"code": "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}')],
         tools=('python',), reasoning_format='auto', enable_thinking=False),
    Case(2231, ('Qwen3.5-4B',),
         ('<tool_call>\n<function=edit>\n<parameter=filename>\n'
          'foo.c\n</parameter>\n<parameter=oldString>\n#iclunde\n'
          '</parameter>\n<parameter=newString>\n#include\n</parameter>\n'
          '</function>\n</tool_call>'),
         calls=[('edit', '{"filename": "foo.c", "oldString": "#iclunde", "newString": "#include"}')],
         tools=('edit',), reasoning_format='auto', enable_thinking=False),
    Case(2260, ('Qwen3.5-4B',),
         ('<tool_call>\n<function=edit>\n<parameter=filename>\n'
          'foo.c\n</parameter>\n<parameter=oldString>\n#iclunde\n'
          '</parameter>\n<parameter=newString>\n#include\n\n</parameter>\n'
          '</function>\n</tool_call>'),
         calls=[('edit', '{"filename": "foo.c", "oldString": "#iclunde", "newString": "#include\\n"}')],
         tools=('edit',), reasoning_format='auto', enable_thinking=False),
    Case(2287, ('Qwen3.5-4B',),
         ('<tool_call>\n<function=python>\n<parameter=code>\n'
          '    print("Hello, world!")\n</parameter>\n</function>\n'
          '</tool_call>'),
         calls=[('python', '{"code": "    print(\\"Hello, world!\\")"}')], tools=('python',),
         reasoning_format='auto', enable_thinking=False),
    Case(2305, ('Qwen3.5-4B',),
         'I need to output the invoice details in JSON\n</think>\n\n{"amount": 123.45, "date": "2025-12-03"}',
         content='{"amount": 123.45, "date": "2025-12-03"}',
         reasoning='I need to output the invoice details in JSON', reasoning_format='auto',
         enable_thinking=True,
         json_schema={'type': 'object', 'properties': {'amount': {'type': 'number'}, 'date': {'type': 'string'}}}),
    Case(2317, ('Qwen3.5-4B',),
         ('<tool_call>\n<function=run_in_terminal>\n<parameter=command>\n'
          'pwd\n</parameter>\n</function>\n</tool_call>'),
         calls=[('run_in_terminal', '{"command": "pwd"}')], tools=('run_in_terminal',),
         reasoning_format='auto', enable_thinking=True),
    Case(2334, ('Qwen3.5-4B',),
         ('Need to inspect the current directory.\n<tool_call>\n'
          '<function=run_in_terminal>\n<parameter=command>\npwd\n'
          '</parameter>\n</function>\n</tool_call>'),
         reasoning='Need to inspect the current directory.', calls=[('run_in_terminal', '{"command": "pwd"}')],
         tools=('run_in_terminal',), reasoning_format='auto', enable_thinking=True),
    Case(2353, ('Qwen3.5-4B',),
         '<tool_call>\n<function=empty_args>\n</function>\n</tool_call>',
         calls=[('empty_args', '{}')], tools=('empty_args',), reasoning_format='auto', enable_thinking=False),
    Case(2365, ('Qwen3.5-4B',),
         '<tool_call>\n<function=empty_args_no_props>\n</function>\n</tool_call>',
         calls=[('empty_args_no_props', '{}')], tools=('empty_args_no_props',), reasoning_format='auto',
         enable_thinking=False),
    Case(2377, ('Qwen3.5-4B',),
         ('<think>\n\n</think>\n\n<tool_call>\n<function=special_function>\n'
          '<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>'),
         reasoning='<think>\n\n', calls=[('special_function', '{"arg1": 1}')], tools=('special_function',),
         reasoning_format='auto'),
    Case(2392, ('Qwen3.5-4B',),
         ('</think>\n\n<tool_call>\n<function=special_function>\n'
          '<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto'),
    Case(2407, ('Qwen3.5-4B',),
         ('</think>\n\n<tool_call>\n<function=run_in_terminal>\n'
          '<parameter=command>\npwd\n</parameter>\n</function>\n'
          '</tool_call>'),
         calls=[('run_in_terminal', '{"command": "pwd"}')], tools=('run_in_terminal',),
         reasoning_format='auto', enable_thinking=True),
    Case(2426, ('Qwen3.5-4B',),
         ('</think>\n\nLet me inspect the current directory.\n'
          '<tool_call>\n<function=run_in_terminal>\n<parameter=command>\n'
          'pwd\n</parameter>\n</function>\n</tool_call>'),
         content='Let me inspect the current directory.\n', calls=[('run_in_terminal', '{"command": "pwd"}')],
         tools=('run_in_terminal',), reasoning_format='auto', enable_thinking=True),
    Case(2447, ('Qwen3.5-4B',),
         ('</think>\n\nLet me inspect the current directory.\n'
          '<tool_call>\n<function=run_in_terminal>\n<parameter=command>\n'
          'pwd\n</parameter>\n</function>\n</tool_call>'),
         content='Let me inspect the current directory.\n', calls=[('run_in_terminal', '{"command": "pwd"}')],
         tools=('run_in_terminal',), reasoning_format='auto', enable_thinking=True, tool_choice='required'),
    Case(2469, ('Qwen3.5-4B',),
         ('I should inspect the directory.\n</think>\n\nLet me inspect it now.\n'
          '<tool_call>\n<function=run_in_terminal>\n<parameter=command>\n'
          'pwd\n</parameter>\n</function>\n</tool_call>'),
         content='Let me inspect it now.\n', reasoning='I should inspect the directory.',
         calls=[('run_in_terminal', '{"command": "pwd"}')], tools=('run_in_terminal',),
         reasoning_format='auto', enable_thinking=True),
    Case(2493, ('Qwen3.5-4B',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(2503, ('Qwen3.5-4B',),
         " thinking\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(2531, ('Qwen3.5-4B',),
         ('I need to run a terminal command.\n</think>\n\n<tool_call>\n'
          '<function=run_in_terminal>\n<parameter=command>\npwd\n'
          '</parameter>\n</function>\n</tool_call>'),
         reasoning='I need to run a terminal command.', calls=[('run_in_terminal', '{"command": "pwd"}')],
         tools=('manage_todo_list', 'run_in_terminal'), reasoning_format='auto', enable_thinking=True,
         history='todo_history'),
    Case(2553, ('Qwen3.5-4B',),
         ('I need to run a terminal command.\n</think>\n\nLet me inspect the current directory.\n'
          '<tool_call>\n<function=run_in_terminal>\n<parameter=command>\n'
          'pwd\n</parameter>\n</function>\n</tool_call>'),
         content='Let me inspect the current directory.\n', reasoning='I need to run a terminal command.',
         calls=[('run_in_terminal', '{"command": "pwd"}')], tools=('manage_todo_list', 'run_in_terminal'),
         reasoning_format='auto', enable_thinking=True, tool_choice='required', history='todo_history'),
    Case(2578, ('Qwen3.5-4B',),
         ('</think>\n\n<tool_call>\n<function=run_in_terminal>\n'
          '<parameter=command>\npwd\n</parameter>\n</function>\n'
          '</tool_call>'),
         calls=[('run_in_terminal', '{"command": "pwd"}')], tools=('manage_todo_list', 'run_in_terminal'),
         reasoning_format='auto', enable_thinking=True, history='todo_history'),
    Case(2604, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(2606, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         "[THINK]I'm\nthinking[/THINK]Hello, world!\nWhat's up?",
         content="[THINK]I'm\nthinking[/THINK]Hello, world!\nWhat's up?"),
    Case(2611, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         "[THINK]I'm\nthinking[/THINK]Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto',
         enable_thinking=True),
    Case(2618, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         '[TOOL_CALLS]special_function[ARGS]{"arg1":1}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto',
         enable_thinking=True),
    Case(2625, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         '[THINK]I\'m\nthinking[/THINK][TOOL_CALLS]special_function[ARGS]{"arg1":1}',
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto', enable_thinking=True),
    Case(2634, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         ('[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]special_function_with_opt[ARGS]{"arg1": 1, "'
          'arg2": 2}'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), reasoning_format='auto', parallel=True),
    Case(2648, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         ('[THINK]I need to output the invoice details in JSON[/THINK]```json\n'
          '{"amount": 123.45, "date": "2025-12-03"}\n```'),
         content='{"amount": 123.45, "date": "2025-12-03"}',
         reasoning='I need to output the invoice details in JSON', reasoning_format='auto',
         json_schema={'type': 'object', 'properties': {'amount': {'type': 'number'}, 'date': {'type': 'string'}}}),
    Case(2660, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         ('[THINK]Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more[/THINK][TOOL_CALLS]sp'
          'ecial_function[ARGS]{"arg1": 1}'),
         reasoning='Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto',
         enable_thinking=True),
    Case(2674, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(2684, ('mistralai-Ministral-3-14B-Reasoning-2512',),
         " thinking[/THINK]Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(2699, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='auto', enable_thinking=False),
    Case(2704, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         "I'm\nthinking\n</think>\nHello, world!\nWhat's up?",
         content="<think>\nI'm\nthinking\n</think>\nHello, world!\nWhat's up?", reasoning_format='none',
         enable_thinking=True),
    Case(2710, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         "I'm\nthinking\n</think>\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto',
         enable_thinking=True),
    Case(2716, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         ('<tool_call>\n<function=special_function>\n<parameter=arg1>\n'
          '1\n</parameter>\n</function>\n</tool_call>\n'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto',
         enable_thinking=False),
    Case(2728, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         ("I'm\nthinking\n</think>\n<tool_call>\n<function=special_function>\n"
          '<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto'),
    Case(2740, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         ('<tool_call>\n<function=special_function>\n<parameter=arg1>\n'
          '1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n'
          '<function=special_function_with_opt>\n<parameter=arg1>\n'
          '1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n'
          '</function>\n</tool_call>\n'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), reasoning_format='auto',
         enable_thinking=False, parallel=True),
    Case(2764, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         ('<tool_call>\n<function=python>\n<parameter=code>\n'
          'def hello():\n    print("Hello, world!")\n\nhello()\n'
          '</parameter>\n</function>\n</tool_call>\n'),
         calls=[('python', '{"code": "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}')],
         tools=('python',), reasoning_format='auto', enable_thinking=False),
    Case(2785, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         'I need to output the invoice details in JSON\n</think>\n{"amount": 123.45, "date": "2025-12-03"}',
         content='{"amount": 123.45, "date": "2025-12-03"}',
         reasoning='I need to output the invoice details in JSON', reasoning_format='auto',
         enable_thinking=True,
         json_schema={'type': 'object', 'properties': {'amount': {'type': 'number'}, 'date': {'type': 'string'}}}),
    Case(2797, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(2807, ('NVIDIA-Nemotron-3-Nano-30B-A3B-BF16',),
         " thinking\n</think>\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(2822, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         "<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>",
         content="Hello, world!\nWhat's up?"),
    Case(2824, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         ("<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_RESPONSE|>Hello, world!\n"
          "What's up?<|END_RESPONSE|>"),
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek'),
    Case(2831, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         ("<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_RESPONSE|>Hello, world!\n"
          "What's up?<|END_RESPONSE|>"),
         content="<|START_THINKING|>I'm\nthinking<|END_THINKING|>Hello, world!\nWhat's up?"),
    Case(2837, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         ("<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
          '    {"tool_call_id": "0", "tool_name": "special_function", "parameters": {"arg1": 1}}\n'
          ']<|END_ACTION|>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1": 1}', '0')],
         tools=('special_function',), reasoning_format='deepseek'),
    Case(2847, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         ("<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
          '    {"tool_call_id": "0", "tool_name": "special_function", '),
         reasoning="I'm\nthinking", calls=[('special_function', '', '0')], tools=('special_function',),
         reasoning_format='deepseek', partial=True),
    Case(2857, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         ('<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n'
          '    {"tool_call_id": "0", "tool_name": "special_function", "parameters": {"arg1": 1}}\n'
          ']<|END_ACTION|>'),
         calls=[('special_function', '{"arg1":1}', '0')], tools=('special_function',),
         reasoning_format='deepseek'),
    Case(2877, ('Cohere2MoE',),
         "I'm\nthinking<|END_THINKING|><|START_TEXT|>Hello, world!\nWhat's up?<|END_TEXT|>",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek'),
    Case(2883, ('Cohere2MoE',),
         "I'm\nthinking<|END_THINKING|><|START_TEXT|>Hello, world!\nWhat's up?<|END_TEXT|>",
         content="<|START_THINKING|>I'm\nthinking<|END_THINKING|>Hello, world!\nWhat's up?"),
    Case(2888, ('Cohere2MoE',),
         "<|END_THINKING|><|START_TEXT|>Hello, world!\nWhat's up?<|END_TEXT|>",
         content="Hello, world!\nWhat's up?", reasoning_format='deepseek'),
    Case(2894, ('Cohere2MoE',),
         ('I need to output the invoice details in JSON<|END_THINKING|><|START_TEXT|>{"amount": 123.45, "date": '
          '"2025-12-03"}<|END_TEXT|>'),
         content='{"amount": 123.45, "date": "2025-12-03"}',
         reasoning='I need to output the invoice details in JSON', tools=('special_function',),
         reasoning_format='deepseek',
         json_schema={'type': 'object', 'properties': {'amount': {'type': 'number'}, 'date': {'type': 'string'}}}),
    Case(2905, ('Cohere2MoE',),
         ('I\'m\nthinking<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_func'
          'tion", "parameters": {"arg1": 1}}\n]<|END_ACTION|>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1": 1}', '0')],
         tools=('special_function',), reasoning_format='deepseek'),
    Case(2916, ('Cohere2MoE',),
         ('<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_function", "parame'
          'ters": {"arg1": 1}}\n]<|END_ACTION|>'),
         calls=[('special_function', '{"arg1":1}', '0')], tools=('special_function',),
         reasoning_format='deepseek'),
    Case(2927, ('Cohere2MoE',),
         ('<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "todo_list", "parameters": '
          '{"todos": ["buy milk", "walk dog"]}}\n]<|END_ACTION|>'),
         calls=[('todo_list', '{"todos": ["buy milk", "walk dog"]}', '0')], tools=('todo_list',),
         reasoning_format='deepseek'),
    Case(2938, ('Cohere2MoE',),
         ('I\'m\nthinking<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_func'
          'tion", "parameters": {"arg1": 1}},\n    {"tool_call_id": "1", "tool_name": "python", "parameters": {"'
          'code": "print(\'hey\')"}}\n]<|END_ACTION|>'),
         reasoning="I'm\nthinking",
         calls=[('special_function', '{"arg1": 1}', '0'), ('python', '{"code": "print(\'hey\')"}', '1')],
         tools=('special_function', 'python'), reasoning_format='deepseek', parallel=True),
    Case(2955, ('Cohere2MoE',),
         "I'm\nthinking<|END_THINKING|><|START_TEXT|>Hello, world!\nWhat's up?<|END_TEXT|>",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", tools=('special_function',),
         reasoning_format='deepseek'),
    Case(2962, ('Cohere2MoE',),
         ('I\'m\nthinking<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_func'
          'tion", '),
         reasoning="I'm\nthinking", calls=[('special_function', '', '0')], tools=('special_function',),
         reasoning_format='deepseek', partial=True),
    Case(2977, ('google-gemma-2-2b-it',),
         'Hello, world!',
         content='Hello, world!'),
    Case(2979, ('google-gemma-2-2b-it',),
         'Line 1\nLine 2\nLine 3',
         content='Line 1\nLine 2\nLine 3'),
    Case(2982, ('google-gemma-2-2b-it',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(2994, ('google-gemma-4-31B-it',),
         'Hello, world!',
         content='Hello, world!'),
    Case(2997, ('google-gemma-4-31B-it',),
         "<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto'),
    Case(3004, ('google-gemma-4-31B-it',),
         "<|channel>thought<channel|>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='auto'),
    Case(3011, ('google-gemma-4-31B-it',),
         "<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?",
         content="<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?",
         reasoning_format='none'),
    Case(3018, ('google-gemma-4-31B-it',),
         '<|tool_call>call:get_time{city:<|"|>London<|"|>}<tool_call|>',
         calls=[('get_time', '{"city": "London"}')], tools=('get_time',)),
    Case(3025, ('google-gemma-4-31B-it',),
         '<|tool_call>call:get_time{city:<|"|>San Francisco<|"|>}<tool_call|>',
         calls=[('get_time', '{"city": "San Francisco"}')], tools=('get_time',)),
    Case(3032, ('google-gemma-4-31B-it',),
         '<|tool_call>call:empty_args{}<tool_call|>',
         calls=[('empty_args', '{}')], tools=('empty_args',)),
    Case(3039, ('google-gemma-4-31B-it',),
         'Hello, world!\nWhat\'s up?<|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|>',
         content="Hello, world!\nWhat's up?", calls=[('get_time', '{"city": "Paris"}')], tools=('get_time',)),
    Case(3046, ('google-gemma-4-31B-it',),
         '<|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|>',
         calls=[('get_time', '{"city": "Paris"}')], tools=('get_time',), tool_choice='required'),
    Case(3054, ('google-gemma-4-31B-it',),
         ('<|channel>thought\nI\'m\nthinking<channel|><|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|'
          '>'),
         reasoning="I'm\nthinking", calls=[('get_time', '{"city": "Paris"}')], tools=('get_time',),
         reasoning_format='auto', tool_choice='required'),
    Case(3066, ('google-gemma-4-31B-it',),
         ('<|tool_call>call:get_time{city:<|"|>London<|"|>}<tool_call|><|tool_call>call:get_weather{city:<|"|>Pa'
          'ris<|"|>}<tool_call|>'),
         calls=[('get_time', '{"city": "London"}'), ('get_weather', '{"city": "Paris"}')],
         tools=('get_time', 'get_weather'), parallel=True),
    Case(3078, ('google-gemma-4-31B-it',),
         '<|tool_call>call:special_function{arg1:42}<tool_call|>',
         calls=[('special_function', '{"arg1": 42}')], tools=('special_function',)),
    Case(3085, ('google-gemma-4-31B-it',),
         '<|tool_call>call:special_function{arg1:-7}<tool_call|>',
         calls=[('special_function', '{"arg1": -7}')], tools=('special_function',)),
    Case(3092, ('google-gemma-4-31B-it',),
         '<|tool_call>call:amount{orig:3.14}<tool_call|>',
         calls=[('amount', '{"orig": 3.14}')], tools=('amount',)),
    Case(3099, ('google-gemma-4-31B-it',),
         '<|tool_call>call:toggle{enabled:true}<tool_call|>',
         calls=[('toggle', '{"enabled": true}')], tools=('toggle',)),
    Case(3106, ('google-gemma-4-31B-it',),
         '<|tool_call>call:toggle{enabled:false}<tool_call|>',
         calls=[('toggle', '{"enabled": false}')], tools=('toggle',)),
    Case(3113, ('google-gemma-4-31B-it',),
         '<|tool_call>call:set_nullable{value:null}<tool_call|>',
         calls=[('set_nullable', '{"value": null}')], tools=('set_nullable',)),
    Case(3120, ('google-gemma-4-31B-it',),
         '<|tool_call>call:todo_list{todos:[<|"|>buy milk<|"|>,<|"|>walk dog<|"|>]}<tool_call|>',
         calls=[('todo_list', '{"todos":["buy milk","walk dog"]}')], tools=('todo_list',)),
    Case(3127, ('google-gemma-4-31B-it',),
         '<|tool_call>call:set_config{config:{theme:<|"|>dark<|"|>,count:3}}<tool_call|>',
         calls=[('set_config', '{"config":{"theme":"dark","count":3}}')], tools=('set_config',)),
    Case(3134, ('google-gemma-4-31B-it',),
         '<|tool_call>call:todo_list{todos:[]}<tool_call|>',
         calls=[('todo_list', '{"todos":[]}')], tools=('todo_list',)),
    Case(3141, ('google-gemma-4-31B-it',),
         '<|tool_call>call:set_config{config:{}}<tool_call|>',
         calls=[('set_config', '{"config":{}}')], tools=('set_config',)),
    Case(3148, ('google-gemma-4-31B-it',),
         '<|tool_call>call:amount{orig:1.5e10}<tool_call|>',
         calls=[('amount', '{"orig": 1.5e10}')], tools=('amount',)),
    Case(3155, ('google-gemma-4-31B-it',),
         "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<channel|>",
         content="Hello, world!\nWhat's up?", reasoning_format='auto'),
    Case(3161, ('google-gemma-4-31B-it',),
         "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<|channel>thought\n<channel|>",
         content="Hello, world!\nWhat's up?", reasoning_format='auto'),
    Case(3167, ('google-gemma-4-31B-it',),
         "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<|channel>thought\n<channel|><channel|>",
         content="Hello, world!\nWhat's up?", reasoning_format='auto'),
    Case(3173, ('google-gemma-4-31B-it',),
         "<|channel><|channel>thought\n<channel|>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='auto'),
    Case(3180, ('google-gemma-4-31B-it',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(3190, ('google-gemma-4-31B-it',),
         " thinking<channel|>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(3299, ('Qwen-QwQ-32B',),
         'Let me think about this...\n</think>\nThe answer is 42.',
         content='The answer is 42.', reasoning='Let me think about this...', reasoning_format='auto',
         enable_thinking=True),
    Case(3305, ('Qwen-QwQ-32B',),
         '</think>Hello, world!',
         content='Hello, world!', reasoning_format='auto'),
    Case(3308, ('Qwen-QwQ-32B',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(3318, ('Qwen-QwQ-32B',),
         " thinking\n</think>\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(3332, ('NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use',),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(3340, ('NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use',),
         ('Hello, world!\nWhat\'s up?<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_c'
          'all>'),
         content="Hello, world!\nWhat's up?", calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',)),
    Case(3352, ('NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(3363, ('google-gemma-2-2b-it',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(3369, ('ibm-granite-granite-3.3-2B-Instruct',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(3371, ('ibm-granite-granite-3.3-2B-Instruct',),
         "<think>I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek'),
    Case(3383, ('ibm-granite-granite-3.3-2B-Instruct',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(3393, ('ibm-granite-granite-3.3-2B-Instruct',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(3409, ('ibm-granite-granite-4.0',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(3411, ('ibm-granite-granite-4.0',),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(3420, ('ibm-granite-granite-4.0',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(3432, ('ibm-granite-granite-4.1',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(3434, ('ibm-granite-granite-4.1',),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(3447, ('ByteDance-Seed-OSS',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(3449, ('ByteDance-Seed-OSS',),
         "<seed:think>I'm thinking about the answer</seed:think>\nHello, world!",
         content='Hello, world!', reasoning="I'm thinking about the answer", reasoning_format='deepseek'),
    Case(3454, ('ByteDance-Seed-OSS',),
         ('<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n'
          '</function>\n</seed:tool_call>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(3464, ('ByteDance-Seed-OSS',),
         ('<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n'
          '</function>\n</seed:tool_call>\n<seed:tool_call>\n'
          '<function=special_function_with_opt>\n<parameter=arg1>1</parameter>\n'
          '<parameter=arg2>2</parameter>\n</function>\n</seed:tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), parallel=True),
    Case(3486, ('ByteDance-Seed-OSS',),
         ('<seed:tool_call>\n<function=todo_list>\n<parameter=todos>[{"item": "Check stuff", "selected": false},'
          ' {"item": "Prepare stuff", "selected": true}]</parameter>\n'
          '</function>\n</seed:tool_call>'),
         calls=[
              ('todo_list', ('{"todos": [{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "'
                             'selected": true}]}'))],
         tools=('todo_list',)),
    Case(3501, ('ByteDance-Seed-OSS',),
         ('<seed:tool_call>\n<function=edit>\n<parameter=filename>foo.cpp</parameter>\n'
          '<parameter=oldString>def foo(arg = "14"):\n    return arg + "bar"\n'
          '</parameter>\n<parameter=newString>def foo(arg = "15"):\n'
          '    pass\n</parameter>\n</function>\n</seed:tool_call>'),
         calls=[
              ('edit', ('{"filename": "foo.cpp", "oldString": "def foo(arg = \\"14\\"):\\n    return arg + \\"ba'
                        'r\\"\\n", "newString": "def foo(arg = \\"15\\"):\\n    pass\\n"}'))],
         tools=('edit',)),
    Case(3529, ('ByteDance-Seed-OSS',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(3539, ('ByteDance-Seed-OSS',),
         " thinking</seed:think>\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(3554, ('Qwen3-Coder',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(3556, ('Qwen3-Coder',),
         ('<tool_call>\n<function=special_function>\n<parameter=arg1>\n'
          '1\n</parameter>\n</function>\n</tool_call>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(3570, ('Qwen3-Coder',),
         '<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(3581, ('Qwen3-Coder',),
         ('Let me call it.\n<function=special_function>\n<parameter=arg1>\n'
          '1\n</parameter>\n</function>\n</tool_call>'),
         content='Let me call it.\n', calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(3597, ('Qwen3-Coder',),
         ('<function=special_function>\n<parameter=arg1>\n1\n'
          '</parameter>\n</function>\n</tool_call>\n<tool_call>\n'
          '<function=special_function_with_opt>\n<parameter=arg1>\n'
          '1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n'
          '</function>\n</tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), parallel=True),
    Case(3624, ('Qwen3-Coder',),
         ('<tool_call>\n<function=special_function>\n<parameter=arg1>\n'
          '1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n'
          '<function=special_function_with_opt>\n<parameter=arg1>\n'
          '1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n'
          '</function>\n</tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), parallel=True),
    Case(3654, ('Qwen3-Coder',),
         ('<tool_call>\n<function=python>\n<parameter=code>\n'
          'def hello():\n    print("Hello, world!")\n\nhello()\n'
          '</parameter>\n</function>\n</tool_call>'),
         calls=[('python', '{"code": "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}')],
         tools=('python',)),
    Case(3675, ('Qwen3-Coder',),
         '<tool_call>\n<function=python>\n<parameter=code>\n格\n</parameter>\n</function>\n</tool_call>',
         calls=[('python', '{"code": "格"}')], tools=('python',)),
    Case(3693, ('Qwen3-Coder',),
         ('<tool_call>\n<function=html>\n<parameter=markup>\n'
          '<html>\n <head>\n  <title>Hello!</title>\n </head>\n'
          '</html>\n</parameter>\n</function>\n</tool_call>'),
         calls=[('html', '{"markup": "<html>\\n <head>\\n  <title>Hello!</title>\\n </head>\\n</html>"}')],
         tools=('html',)),
    Case(3715, ('Qwen3-Coder',),
         ('<tool_call>\n<function=todo_list>\n<parameter=todos>\n'
          '[{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]\n'
          '</parameter>\n</function>\n</tool_call>'),
         calls=[
              ('todo_list', ('{"todos": [{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "'
                             'selected": true}]}'))],
         tools=('todo_list',)),
    Case(3733, ('Qwen3-Coder',),
         ('<tool_call>\n<function=edit>\n<parameter=newString>\n'
          '#include\n</parameter>\n<parameter=filename>\nfoo.c\n'
          '</parameter>\n<parameter=oldString>\n#iclunde\n</parameter>\n'
          '</function>\n</tool_call>'),
         calls=[('edit', '{"newString": "#include", "filename": "foo.c", "oldString": "#iclunde"}')],
         tools=('edit',)),
    Case(3748, ('Qwen3-Coder',),
         ('<tool_call>\n<function=tool_2req_4opt>\n<parameter=req2>\n'
          '42\n</parameter>\n<parameter=req1>\nhello\n</parameter>\n'
          '<parameter=opt2>\n200\n</parameter>\n</function>\n'
          '</tool_call>'),
         calls=[('tool_2req_4opt', '{"req2": 42, "req1": "hello", "opt2": 200}')], tools=('tool_2req_4opt',)),
    Case(3764, ('Qwen3-Coder',),
         ('<tool_call>\n<function=tool_2req_4opt>\n<parameter=req1>\n'
          'hello\n</parameter>\n<parameter=req2>\n42\n</parameter>\n'
          '<parameter=opt4>\n100\n</parameter>\n<parameter=opt2>\n'
          '200\n</parameter>\n</function>\n</tool_call>'),
         calls=[('tool_2req_4opt', '{"req1": "hello", "req2": 42, "opt4": 100, "opt2": 200}')],
         tools=('tool_2req_4opt',)),
    Case(3781, ('Qwen3-Coder',),
         ('<tool_call>\n<function=tool_2req_5opt>\n<parameter=req1>\n'
          'world\n</parameter>\n<parameter=req2>\n7\n</parameter>\n'
          '<parameter=opt5>\nlast\n</parameter>\n<parameter=opt3>\n'
          'middle\n</parameter>\n<parameter=opt1>\nfirst\n</parameter>\n'
          '</function>\n</tool_call>'),
         calls=[
              ('tool_2req_5opt', ('{"req1": "world", "req2": 7, "opt5": "last", "opt3": "middle", "opt1": "first'
                                  '"}'))],
         tools=('tool_2req_5opt',)),
    Case(3799, ('Qwen3-Coder',),
         ('<tool_call>\n<function=tool_2req_5opt>\n<parameter=req1>\n'
          'test\n</parameter>\n<parameter=req2>\n99\n</parameter>\n'
          '<parameter=opt3>\nc\n</parameter>\n<parameter=opt1>\n'
          'a\n</parameter>\n<parameter=opt5>\ne\n</parameter>\n'
          '<parameter=opt4>\n4\n</parameter>\n<parameter=opt2>\n'
          '2\n</parameter>\n</function>\n</tool_call>'),
         calls=[
              ('tool_2req_5opt', ('{"req1": "test", "req2": 99, "opt3": "c", "opt1": "a", "opt5": "e", "opt4": 4'
                                  ', "opt2": 2}'))],
         tools=('tool_2req_5opt',)),
    Case(3819, ('Qwen3-Coder',),
         ('<tool_call>\n<function=set_nullable_str>\n<parameter=name>\n'
          'hello world\n</parameter>\n</function>\n</tool_call>'),
         calls=[('set_nullable_str', '{"name": "hello world"}')], tools=('set_nullable_str',)),
    Case(3832, ('Qwen3-Coder',),
         ('<tool_call>\n<function=set_nullable_str_nf>\n<parameter=name>\n'
          'hello world\n</parameter>\n</function>\n</tool_call>'),
         calls=[('set_nullable_str_nf', '{"name": "hello world"}')], tools=('set_nullable_str_nf',)),
    Case(3845, ('Qwen3-Coder',),
         ('<tool_call>\n<function=set_nullable_int>\n<parameter=count>\n'
          '42\n</parameter>\n</function>\n</tool_call>'),
         calls=[('set_nullable_int', '{"count": 42}')], tools=('set_nullable_int',)),
    Case(3858, ('Qwen3-Coder',),
         ('<tool_call>\n<function=set_nullable_str>\n<parameter=name>\n'
          'null\n</parameter>\n</function>\n</tool_call>'),
         calls=[('set_nullable_str', '{"name": null}')], tools=('set_nullable_str',)),
    Case(3871, ('Qwen3-Coder',),
         ('<tool_call>\n<function=set_union>\n<parameter=value>\n'
          '{"a": 1}\n</parameter>\n<parameter=amount>\n2 dollars\n'
          '</parameter>\n</function>\n</tool_call>'),
         calls=[('set_union', '{"value": {"a": 1}, "amount": "2 dollars"}')], tools=('set_union',)),
    Case(3884, ('Qwen3-Coder',),
         ('<tool_call>\n<function=set_union>\n<parameter=value>\n'
          '{not valid json\n</parameter>\n<parameter=amount>\n'
          '42\n</parameter>\n</function>\n</tool_call>'),
         calls=[('set_union', '{"value": "{not valid json", "amount": 42}')], tools=('set_union',)),
    Case(3898, ('Qwen3-Coder',),
         '<tool_call>\n<function=set_unit>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>',
         calls=[('set_unit', '{"unit": "celsius"}')], tools=('set_unit',)),
    Case(3911, ('Qwen3-Coder',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(3920, ('deepseek-ai-DeepSeek-V3.1',),
         ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "XYZCITY"}<｜tool▁call▁end'
          '｜><｜tool▁calls▁end｜>'),
         calls=[('get_time', '{"city":"XYZCITY"}')], tools=('get_time',), reasoning_format='deepseek',
         enable_thinking=False),
    Case(3930, ('deepseek-ai-DeepSeek-V3.1',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(3940, ('deepseek-ai-DeepSeek-V3.1',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(3953, ('deepseek-ai-DeepSeek-V3.1',),
         ('REASONING</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Tokyo"}<'
          '｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
         reasoning='REASONING', calls=[('get_time', '{"city":"Tokyo"}')], tools=('get_time',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(3965, ('deepseek-ai-DeepSeek-V3.1',),
         ('REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Pa'
          'ris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁e'
          'nd｜><｜tool▁calls▁end｜>'),
         content='CONTENT', reasoning='REASONING',
         calls=[('get_time', '{"city":"Paris"}'), ('get_weather', '{"city":"Paris"}')],
         tools=('get_time', 'get_weather'), reasoning_format='deepseek', enable_thinking=True, parallel=True),
    Case(3983, ('deepseek-ai-DeepSeek-V3.1',),
         'REASONING</think>\nCONTENT',
         content='CONTENT', reasoning='REASONING\n', reasoning_format='deepseek', enable_thinking=True),
    Case(3992, ('deepseek-ai-DeepSeek-V3.1',),
         'CONTENT',
         content='CONTENT', reasoning_format='deepseek', enable_thinking=False),
    Case(4008, ('deepseek-ai-DeepSeek-V3.2',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='deepseek', enable_thinking=False),
    Case(4015, ('deepseek-ai-DeepSeek-V3.2',),
         "I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek',
         enable_thinking=True),
    Case(4022, ('deepseek-ai-DeepSeek-V3.2',),
         ('Let me check the time</think>\n\n<｜DSML｜function_calls>\n'
          '<｜DSML｜invoke name="get_time">\n<｜DSML｜parameter name="city" string="true">Tokyo</｜DSML｜paramet'
          'er>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Let me check the time', calls=[('get_time', '{"city": "Tokyo"}')], tools=('get_time',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4036, ('deepseek-ai-DeepSeek-V3.2',),
         ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="special_function">\n'
          '<｜DSML｜parameter name="arg1" string="false">1</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek',
         enable_thinking=False),
    Case(4049, ('deepseek-ai-DeepSeek-V3.2',),
         ('Calling both</think>\n\n<｜DSML｜function_calls>\n'
          '<｜DSML｜invoke name="get_time">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜paramet'
          'er>\n</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">\n'
          '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Calling both',
         calls=[('get_time', '{"city": "Paris"}'), ('get_weather', '{"city": "Paris"}')],
         tools=('get_time', 'get_weather'), reasoning_format='deepseek', enable_thinking=True, parallel=True),
    Case(4069, ('deepseek-ai-DeepSeek-V3.2',),
         ('Thinking about it</think>Let me call the function.\n\n'
          '<｜DSML｜function_calls>\n<｜DSML｜invoke name="special_function">\n'
          '<｜DSML｜parameter name="arg1" string="false">1</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         content='Let me call the function.', reasoning='Thinking about it',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek',
         enable_thinking=True),
    Case(4089, ('deepseek-ai-DeepSeek-V3.2',),
         ('Test negative</think>\n\n<｜DSML｜function_calls>\n'
          '<｜DSML｜invoke name="magic_int">\n<｜DSML｜parameter name="ref" string="false">-14</｜DSML｜paramete'
          'r>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Test negative', calls=[('magic_int', '{"ref": -14}')], tools=('magic_int',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4106, ('deepseek-ai-DeepSeek-V3.2',),
         ('Test decimal</think>\n\n<｜DSML｜function_calls>\n'
          '<｜DSML｜invoke name="amount">\n<｜DSML｜parameter name="orig" string="false">3.14</｜DSML｜parameter'
          '>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Test decimal', calls=[('amount', '{"orig": 3.14}')], tools=('amount',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4123, ('deepseek-ai-DeepSeek-V3.2',),
         ('Test boolean</think>\n\n<｜DSML｜function_calls>\n'
          '<｜DSML｜invoke name="toggle">\n<｜DSML｜parameter name="enabled" string="false">true</｜DSML｜parame'
          'ter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Test boolean', calls=[('toggle', '{"enabled": true}')], tools=('toggle',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4140, ('deepseek-ai-DeepSeek-V3.2',),
         ('Test array</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="todo_list">\n'
          '<｜DSML｜parameter name="todos" string="false">["buy milk","walk dog"]</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Test array', calls=[('todo_list', '{"todos": ["buy milk", "walk dog"]}')],
         tools=('todo_list',), reasoning_format='deepseek', enable_thinking=True),
    Case(4157, ('deepseek-ai-DeepSeek-V3.2',),
         ('Test object</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="set_config">\n'
          '<｜DSML｜parameter name="config" string="false">{"theme":"dark","level":2}</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Test object', calls=[('set_config', '{"config": {"theme": "dark", "level": 2}}')],
         tools=('set_config',), reasoning_format='deepseek', enable_thinking=True),
    Case(4174, ('deepseek-ai-DeepSeek-V3.2',),
         ('</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_time">\n'
          '<｜DSML｜parameter name="city" string="true">XYZCITY</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         calls=[('get_time', '{"city": "XYZCITY"}')], tools=('get_time',), reasoning_format='deepseek',
         enable_thinking=True),
    Case(4188, ('deepseek-ai-DeepSeek-V3.2',),
         ('Multi-arg call</think>\n\n<｜DSML｜function_calls>\n'
          '<｜DSML｜invoke name="magic_int">\n<｜DSML｜parameter name="ref" string="false">42</｜DSML｜parameter'
          '>\n<｜DSML｜parameter name="name" string="true">foo bar</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜function_calls>'),
         reasoning='Multi-arg call', calls=[('magic_int', '{"ref": 42, "name": "foo bar"}')],
         tools=('magic_int',), reasoning_format='deepseek', enable_thinking=True),
    Case(4206, ('deepseek-ai-DeepSeek-V3.2',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(4216, ('deepseek-ai-DeepSeek-V3.2',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(4234, ('deepseek-ai-DeepSeek-V4',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='deepseek', enable_thinking=False),
    Case(4241, ('deepseek-ai-DeepSeek-V4',),
         "I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek',
         enable_thinking=True),
    Case(4248, ('deepseek-ai-DeepSeek-V4',),
         ('Let me check the time</think>\n\n<｜DSML｜tool_calls>\n'
          '<｜DSML｜invoke name="get_time">\n<｜DSML｜parameter name="city" string="true">Tokyo</｜DSML｜paramet'
          'er>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
         reasoning='Let me check the time', calls=[('get_time', '{"city": "Tokyo"}')], tools=('get_time',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4262, ('deepseek-ai-DeepSeek-V4',),
         ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="special_function">\n'
          '<｜DSML｜parameter name="arg1" string="false">1</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek',
         enable_thinking=False),
    Case(4275, ('deepseek-ai-DeepSeek-V4',),
         ('Calling both</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_time">\n'
          '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">\n'
          '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
         reasoning='Calling both',
         calls=[('get_time', '{"city": "Paris"}'), ('get_weather', '{"city": "Paris"}')],
         tools=('get_time', 'get_weather'), reasoning_format='deepseek', enable_thinking=True, parallel=True),
    Case(4295, ('deepseek-ai-DeepSeek-V4',),
         ('Thinking about it</think>Let me call the function.\n\n'
          '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="special_function">\n'
          '<｜DSML｜parameter name="arg1" string="false">1</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
         content='Let me call the function.', reasoning='Thinking about it',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek',
         enable_thinking=True),
    Case(4315, ('deepseek-ai-DeepSeek-V4',),
         ('Multi-arg call</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="magic_int">\n'
          '<｜DSML｜parameter name="ref" string="false">42</｜DSML｜parameter>\n'
          '<｜DSML｜parameter name="name" string="true">foo bar</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
         reasoning='Multi-arg call', calls=[('magic_int', '{"ref": 42, "name": "foo bar"}')],
         tools=('magic_int',), reasoning_format='deepseek', enable_thinking=True),
    Case(4333, ('deepseek-ai-DeepSeek-V4',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(4343, ('deepseek-ai-DeepSeek-V4',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(4353, ('deepseek-ai-DeepSeek-V4',),
         ('Let me check the time\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_time">\n'
          '<｜DSML｜parameter name="city" string="true">Tokyo</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
         reasoning='Let me check the time', calls=[('get_time', '{"city": "Tokyo"}')], tools=('get_time',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4371, ('deepseek-ai-DeepSeek-V4-Flash-0731',),
         ('\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="special_function">\n'
          '<｜DSML｜parameter name="arg1" string="false">1</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek',
         enable_thinking=False),
    Case(4389, ('GLM-4.6',),
         '<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(4404, ('GLM-4.7-Flash',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", enable_thinking=False),
    Case(4411, ('GLM-4.7-Flash',),
         "I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek',
         enable_thinking=True),
    Case(4419, ('GLM-4.7-Flash',),
         '<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), enable_thinking=False),
    Case(4430, ('GLM-4.7-Flash',),
         ("I'm\nthinking</think><tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool"
          '_call>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4442, ('GLM-4.7-Flash',),
         ('<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call><tool_call>spec'
          'ial_function_with_opt<arg_key>arg1</arg_key><arg_value>1</arg_value><arg_key>arg2</arg_key><arg_value'
          '>2</arg_value></tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), enable_thinking=False, parallel=True),
    Case(4468, ('GLM-4.7-Flash',),
         'Let me read the diff content.</think><tool_call>read_file_diff_md</tool_call>',
         reasoning='Let me read the diff content.', calls=[('read_file_diff_md', '{}')],
         tools=('read_file_diff_md',), reasoning_format='deepseek', enable_thinking=True),
    Case(4482, ('GLM-4.7-Flash',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(4492, ('GLM-4.7-Flash',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(4507, ('Spark2.5',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", enable_thinking=False),
    Case(4513, ('Spark2.5',),
         "I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek',
         enable_thinking=True),
    Case(4520, ('Spark2.5',),
         '<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), enable_thinking=False),
    Case(4530, ('Spark2.5',),
         ("I'm\nthinking</think><tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool"
          '_call>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(4542, ('Spark2.5',),
         ('<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call><tool_call>spec'
          'ial_function_with_opt<arg_key>arg1</arg_key><arg_value>1</arg_value><arg_key>arg2</arg_key><arg_value'
          '>2</arg_value></tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), enable_thinking=False, parallel=True),
    Case(4560, ('Spark2.5',),
         ('Preparing updates.<tool_call>magic_int<arg_key>ref</arg_key><arg_value>42</arg_value><arg_key>name</a'
          'rg_key><arg_value>上海</arg_value></tool_call><tool_call>amount<arg_key>orig</arg_key><arg_value>2.5<'
          '/arg_value></tool_call><tool_call>toggle<arg_key>enabled</arg_key><arg_value>true</arg_value></tool_c'
          'all><tool_call>set_config<arg_key>config</arg_key><arg_value>{"source": "spark", "options": {"strict"'
          ': true}}</arg_value></tool_call><tool_call>nested_args<arg_key>tags</arg_key><arg_value>["alpha", "测'
          '试"]</arg_value><arg_key>entries</arg_key><arg_value>[{"id": 1, "label": "first"}, {"id": 2, "label":'
          ' "第二"}]</arg_value></tool_call><tool_call>empty_args</tool_call>'),
         content='Preparing updates.',
         calls=[
              ('magic_int', '{"ref": 42, "name": "上海"}'),
              ('amount', '{"orig": 2.5}'),
              ('toggle', '{"enabled": true}'),
              ('set_config', '{"config": {"source": "spark", "options": {"strict": true}}}'),
              ('nested_args', ('{"tags": ["alpha", "测试"], "entries": [{"id": 1, "label": "first"}, {"id": 2, "'
                               'label": "第二"}]}')),
              ('empty_args', '{}')],
         tools=('magic_int', 'amount', 'toggle', 'set_config', 'nested_args', 'empty_args'),
         enable_thinking=False, parallel=True),
    Case(4666, ('inclusionai-ling-3.0-flash',),
         ('I need to check the time first.\n<tool_call>get_time\n'
          '<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n'
          '</tool_call>'),
         reasoning='I need to check the time first.\n', calls=[('get_time', '{"city": "Paris"}')],
         tools=('get_time',), reasoning_format='deepseek'),
    Case(4674, ('inclusionai-ling-3.0-flash',),
         ('Let me check the time.\n</think>\nChecking it now.\n'
          '<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n'
          '</tool_call>'),
         content='Checking it now.\n', reasoning='Let me check the time.\n',
         calls=[('get_time', '{"city": "Paris"}')], tools=('get_time',), reasoning_format='deepseek'),
    Case(4683, ('inclusionai-ling-3.0-flash',),
         ('<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n'
          '</tool_call>\nThe time has been checked.'),
         content='\nThe time has been checked.', calls=[('get_time', '{"city": "Paris"}')],
         tools=('get_time',), reasoning_format='deepseek'),
    Case(4691, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>get_time\n<arg_key>city</arg_key>\n'
          '<arg_value>Paris</arg_value>\n</tool_call>\n<tool_call>get_time\n'
          '<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n'
          '</tool_call>'),
         calls=[('get_time', '{"city": "Paris"}'), ('get_time', '{"city": "Paris"}')], tools=('get_time',),
         reasoning_format='deepseek', parallel=True),
    Case(4703, ('inclusionai-ling-3.0-flash',),
         ('check this\n</think>\n<tool_call>tool_2req_4opt\n<arg_key>req1</arg_key>\n'
          '<arg_value>contains </think> and <tool_call> strings</arg_value>\n'
          '<arg_key>req2</arg_key>\n<arg_value>1</arg_value>\n'
          '</tool_call>'),
         reasoning='check this\n',
         calls=[('tool_2req_4opt', '{"req1": "contains </think> and <tool_call> strings", "req2": 1}')],
         tools=('tool_2req_4opt',), reasoning_format='deepseek'),
    Case(4716, ('inclusionai-ling-3.0-flash',),
         ('I need to check the time first.\n<tool_call>get_time\n'
          '<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n'
          '</tool_call>'),
         content='I need to check the time first.\n', calls=[('get_time', '{"city": "Paris"}')],
         tools=('get_time',), reasoning_format='none'),
    Case(4725, ('inclusionai-ling-3.0-flash',),
         'Here is the answer.\nNo think block at all.',
         content='Here is the answer.\nNo think block at all.', reasoning_format='deepseek',
         enable_thinking=False),
    Case(4732, ('inclusionai-ling-3.0-flash',),
         '<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>',
         calls=[('get_time', '{"city": "Paris"}')], tools=('get_time',), reasoning_format='deepseek',
         enable_thinking=False),
    Case(4742, ('inclusionai-ling-3.0-flash',),
         'Here is the answer.<|role_end|>',
         content='Here is the answer.', reasoning_format='deepseek', enable_thinking=False),
    Case(4748, ('inclusionai-ling-3.0-flash',),
         '<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call><|role_end|>',
         calls=[('get_time', '{"city": "Paris"}')], tools=('get_time',), reasoning_format='deepseek'),
    Case(4756, ('inclusionai-ling-3.0-flash',),
         '</think>\n<tool_call>get_time<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>',
         calls=[('get_time', '{"city": "Paris"}')], tools=('get_time',), reasoning_format='deepseek'),
    Case(4763, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>tool_2req_4opt\n<arg_key>req2</arg_key>\n'
          '<arg_value>7</arg_value>\n<arg_key>req1</arg_key>\n'
          '<arg_value>hello</arg_value>\n</tool_call>'),
         calls=[('tool_2req_4opt', '{"req2": 7, "req1": "hello"}')], tools=('tool_2req_4opt',),
         reasoning_format='deepseek'),
    Case(4773, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>tool_2req_4opt\n<arg_key>req1</arg_key>\n'
          '<arg_value>hello</arg_value>\n<arg_key>req2</arg_key>\n'
          '<arg_value>7</arg_value>\n<arg_key>opt1</arg_key>\n'
          '<arg_value>extra</arg_value>\n</tool_call>'),
         calls=[('tool_2req_4opt', '{"req1": "hello", "req2": 7, "opt1": "extra"}')],
         tools=('tool_2req_4opt',), reasoning_format='deepseek'),
    Case(4784, ('inclusionai-ling-3.0-flash',),
         '</think>\n<tool_call>magic_int\n<arg_key>ref</arg_key>\n<arg_value>42</arg_value>\n</tool_call>',
         calls=[('magic_int', '{"ref": 42}')], tools=('magic_int',), reasoning_format='deepseek'),
    Case(4793, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>set_nullable_str\n<arg_key>name</arg_key>\n'
          '<arg_value>null</arg_value>\n</tool_call>'),
         calls=[('set_nullable_str', '{"name": null}')], tools=('set_nullable_str',),
         reasoning_format='deepseek'),
    Case(4801, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>set_nullable_str\n<arg_key>name</arg_key>\n'
          '<arg_value>hello world</arg_value>\n</tool_call>'),
         calls=[('set_nullable_str', '{"name": "hello world"}')], tools=('set_nullable_str',),
         reasoning_format='deepseek'),
    Case(4811, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>set_nullable_str\n<arg_key>name</arg_key>\n'
          '<arg_value>123 Main St</arg_value>\n</tool_call>'),
         calls=[('set_nullable_str', '{"name": "123 Main St"}')], tools=('set_nullable_str',),
         reasoning_format='deepseek'),
    Case(4820, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>set_union\n<arg_key>value</arg_key>\n'
          '<arg_value>{"a": 1}</arg_value>\n<arg_key>amount</arg_key>\n'
          '<arg_value>7</arg_value>\n</tool_call>'),
         calls=[('set_union', '{"value": {"a": 1}, "amount": 7}')], tools=('set_union',),
         reasoning_format='deepseek'),
    Case(4829, ('inclusionai-ling-3.0-flash',),
         ('</think>\n<tool_call>set_union\n<arg_key>value</arg_key>\n'
          '<arg_value>plain text</arg_value>\n<arg_key>amount</arg_key>\n'
          '<arg_value>1abc</arg_value>\n</tool_call>'),
         calls=[('set_union', '{"value": "plain text", "amount": "1abc"}')], tools=('set_union',),
         reasoning_format='deepseek'),
    Case(4841, ('inclusionai-ling-3.0-flash',),
         'Hello, world!',
         content='Hello, world!', reasoning="I'm thinking", reasoning_format='deepseek', enable_thinking=True,
         history='prefill_thinking', continuation='content'),
    Case(4851, ('inclusionai-ling-3.0-flash',),
         ' more</think>Hello, world!',
         content='Hello, world!', reasoning="I'm thinking more", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_thinking'),
    Case(4869, ('Kimi-K3',),
         "<|open|>response<|sep|>Hello, world!\nWhat's up?<|close|>response<|sep|><|close|>message<|sep|>",
         content="Hello, world!\nWhat's up?"),
    Case(4875, ('Kimi-K3',),
         ("I'm thinking about this<|close|>think<|sep|><|open|>response<|sep|>Hello, world!\n"
          "What's up?<|close|>response<|sep|><|close|>message<|sep|>"),
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking about this", reasoning_format='auto'),
    Case(4883, ('Kimi-K3',),
         ('<|open|>response<|sep|>Use the response tag, then message the handler.<|close|>response<|sep|><|close'
          '|>message<|sep|>'),
         content='Use the response tag, then message the handler.'),
    Case(4889, ('Kimi-K3',),
         'I was still thinking when the budget ran out',
         reasoning='I was still thinking when the budget ran out', reasoning_format='auto'),
    Case(4895, ('Kimi-K3',),
         ('<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="special_functio'
          'n" index="1"<|sep|><|open|>argument key="arg1" type="number"<|sep|>1<|close|>argument<|sep|><|close|>'
          'call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>'),
         calls=[('special_function', '{"arg1":1}')], tools=('special_function',)),
    Case(4907, ('Kimi-K3',),
         ('I should call it<|close|>think<|sep|><|open|>response<|sep|>On it.<|close|>response<|sep|><|open|>too'
          'ls<|sep|><|open|>call tool="special_function" index="1"<|sep|><|open|>argument key="arg1" type="numbe'
          'r"<|sep|>1<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>'),
         content='On it.', reasoning='I should call it', calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',), reasoning_format='auto'),
    Case(4920, ('Kimi-K3',),
         ('<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="special_functio'
          'n_with_opt" index="1"<|sep|><|open|>argument key="arg1" type="number"<|sep|>1<|close|>argument<|sep|>'
          '<|open|>argument key="arg2" type="number"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|><|close|'
          '>tools<|sep|><|close|>message<|sep|>'),
         calls=[('special_function_with_opt', '{"arg1":1,"arg2":2}')], tools=('special_function_with_opt',)),
    Case(4933, ('Kimi-K3',),
         ('<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="special_functio'
          'n" index="1"<|sep|><|open|>argument key="arg1" type="number"<|sep|>1<|close|>argument<|sep|><|close|>'
          'call<|sep|><|open|>call tool="special_function_with_opt" index="2"<|sep|><|open|>argument key="arg1" '
          'type="number"<|sep|>1<|close|>argument<|sep|><|open|>argument key="arg2" type="number"<|sep|>2<|close'
          '|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>'),
         calls=[('special_function', '{"arg1":1}'), ('special_function_with_opt', '{"arg1":1,"arg2":2}')],
         tools=('special_function', 'special_function_with_opt'), parallel=True),
    Case(4951, ('Kimi-K3',),
         ('<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="python" index="'
          '1"<|sep|><|open|>argument key="code" type="string"<|sep|>print(\'hey\')<|close|>argument<|sep|><|clos'
          'e|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>'),
         calls=[('python', '{"code":"print(\'hey\')"}')], tools=('python',)),
    Case(4971, ('Kimi-K2-Thinking',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(4974, ('Kimi-K2-Thinking',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin'
          '|>{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>'),
         calls=[('special_function', '{"arg1": 1}', 'functions.special_function:0')],
         tools=('special_function',)),
    Case(4982, ('Kimi-K2-Thinking',),
         ("<think>I'm thinking about this</think><|tool_calls_section_begin|><|tool_call_begin|>functions.specia"
          'l_function:0<|tool_call_argument_begin|>{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>'),
         reasoning="I'm thinking about this",
         calls=[('special_function', '{"arg1": 1}', 'functions.special_function:0')],
         tools=('special_function',), reasoning_format='auto'),
    Case(4992, ('Kimi-K2-Thinking',),
         ("Hello, world!\nWhat's up?<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<"
          '|tool_call_argument_begin|>{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>'),
         content="Hello, world!\nWhat's up?",
         calls=[('special_function', '{"arg1": 1}', 'functions.special_function:0')],
         tools=('special_function',)),
    Case(5001, ('Kimi-K2-Thinking',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin'
          '|>{"arg1": 1}<|tool_call_end|><|tool_call_begin|>functions.special_function_with_opt:1<|tool_call_arg'
          'ument_begin|>{"arg1": 1, "arg2": 2}<|tool_call_end|><|tool_calls_section_end|>'),
         calls=[
              ('special_function', '{"arg1": 1}',
               'functions.special_function:0'),
              ('special_function_with_opt', '{"arg1": 1, "arg2": 2}',
               'functions.special_function_with_opt:1')],
         tools=('special_function', 'special_function_with_opt'), reasoning_format='auto', parallel=True),
    Case(5018, ('Kimi-K2-Thinking',),
         ('<think>I need to call two functions</think><|tool_calls_section_begin|><|tool_call_begin|>functions.s'
          'pecial_function:0<|tool_call_argument_begin|>{"arg1": 1}<|tool_call_end|><|tool_call_begin|>functions'
          '.python:1<|tool_call_argument_begin|>{"code": "print(\'hey\')"}<|tool_call_end|><|tool_calls_section_'
          'end|>'),
         reasoning='I need to call two functions',
         calls=[
              ('special_function', '{"arg1": 1}',
               'functions.special_function:0'),
              ('python', '{"code": "print(\'hey\')"}',
               'functions.python:1')],
         tools=('special_function', 'python'), reasoning_format='auto', parallel=True),
    Case(5037, ('Kimi-K2-Thinking',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.python:0<|tool_call_argument_begin|>{"code":'
          ' "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}<|tool_call_end|><|tool_calls_section_e'
          'nd|>'),
         calls=[
              ('python', '{"code": "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}',
               'functions.python:0')],
         tools=('python',)),
    Case(5047, ('Kimi-K2-Thinking',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.empty_args:0<|tool_call_argument_begin|>{}<|'
          'tool_call_end|><|tool_calls_section_end|>'),
         calls=[('empty_args', '{}', 'functions.empty_args:0')], tools=('empty_args',)),
    Case(5055, ('Kimi-K2-Thinking',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin'
          '|>{"arg1": '),
         calls=[('special_function', '{"arg1": ', 'functions.special_function:0')],
         tools=('special_function',), reasoning_format='auto', partial=True),
    Case(5065, ('Kimi-K2-Thinking',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin'
          '|>{"arg1": 1}<|tool_call_end|><|tool_call_begin|>functions.python:1<|tool_call_argument_begin|>{"code'
          '": "print(1)"}<|tool_call_end|><|tool_call_begin|>functions.html:2<|tool_call_argument_begin|>{"marku'
          'p": "<p>test</p>"}<|tool_call_end|><|tool_calls_section_end|>'),
         calls=[
              ('special_function', '{"arg1": 1}',
               'functions.special_function:0'),
              ('python', '{"code": "print(1)"}',
               'functions.python:1'),
              ('html', '{"markup": "<p>test</p>"}',
               'functions.html:2')],
         tools=('special_function', 'python', 'html'), reasoning_format='auto', parallel=True),
    Case(5084, ('Kimi-K2-Thinking',),
         ('<think>I need to call two functions<|tool_calls_section_begin|><|tool_call_begin|>functions.special_f'
          'unction:0<|tool_call_argument_begin|>{"arg1": 1}<|tool_call_end|><|tool_call_begin|>functions.python:'
          '1<|tool_call_argument_begin|>{"code": "print(\'hey\')"}<|tool_call_end|><|tool_calls_section_end|>'),
         reasoning='I need to call two functions',
         calls=[
              ('special_function', '{"arg1": 1}',
               'functions.special_function:0'),
              ('python', '{"code": "print(\'hey\')"}',
               'functions.python:1')],
         tools=('special_function', 'python'), reasoning_format='auto', parallel=True),
    Case(5103, ('Kimi-K2-Thinking',),
         ('<think>I need to call two functions<|tool_call_begin|>functions.special_function:0<|tool_call_argumen'
          't_begin|>{"arg1": 1}<|tool_call_begin|>functions.python:1<|tool_call_argument_begin|>{"code": "print('
          '\'hey\')"}'),
         reasoning='I need to call two functions',
         calls=[
              ('special_function', '{"arg1": 1}',
               'functions.special_function:0'),
              ('python', '{"code": "print(\'hey\')"}',
               'functions.python:1')],
         tools=('special_function', 'python'), reasoning_format='auto', parallel=True),
    Case(5120, ('Kimi-K2-Thinking',),
         ('<|tool_call_begin|>functions.execute_command:0<|tool_call_argument_begin|>{"command": "ls -lah", "cwd'
          '": "/home/user/development/exllamav3", "timeout": 10}'),
         calls=[
              ('execute_command', ('{"command": "ls -lah", "cwd": "/home/user/development/exllamav3", "timeout":'
                                   ' 10}'),
               'functions.execute_command:0')],
         tools=('execute_command',), reasoning_format='auto', parallel=True),
    Case(5158, ('Kimi-K2-Thinking',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(5168, ('Kimi-K2-Thinking',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(5185, ('moonshotai-Kimi-K2',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(5186, ('moonshotai-Kimi-K2',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin'
          '|>{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>'),
         calls=[('special_function', '{"arg1": 1}', 'functions.special_function:0')],
         tools=('special_function',)),
    Case(5196, ('Kimi-K2-Instruct',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(5197, ('Kimi-K2-Instruct',),
         ('<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin'
          '|>{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>'),
         calls=[('special_function', '{"arg1": 1}', 'functions.special_function:0')],
         tools=('special_function',)),
    Case(5206, ('moonshotai-Kimi-K2',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(5216, ('moonshotai-Kimi-K2',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(5242, ('LFM2.5-8B-A1B',),
         "<think>I'm\nthinking</think><|tool_call_start|>[special_function(arg1=1)]<|tool_call_end|>",
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto'),
    Case(5249, ('LFM2.5-8B-A1B',),
         ('<think>I need to call a function</think>Let me check the time.<|tool_call_start|>[get_time(city="Pari'
          's")]<|tool_call_end|>'),
         content='Let me check the time.', reasoning='I need to call a function',
         calls=[('get_time', '{"city":"Paris"}')], tools=('get_time',), reasoning_format='auto'),
    Case(5259, ('LFM2.5-8B-A1B',),
         ('<think>Let me think about <|tool_call_start|>[special_function(arg1=1)]<|tool_call_end|> hmm</think><'
          '|tool_call_start|>[special_function(arg1=1)]<|tool_call_end|>'),
         reasoning='Let me think about <|tool_call_start|>[special_function(arg1=1)]<|tool_call_end|> hmm',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto'),
    Case(5270, ('LFM2.5-8B-A1B',),
         "<think>I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto',
         enable_thinking=False),
    Case(5276, ('LFM2.5-8B-A1B',),
         "<think>I'm\nthinking</think><|tool_call_start|>[special_function(arg1=1)]<|tool_call_end|>",
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto', enable_thinking=False),
    Case(5284, ('LFM2.5-8B-A1B',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(5295, ('LFM2.5-8B-A1B',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(5311, ('Reka-Edge',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", enable_thinking=False),
    Case(5314, ('Reka-Edge',),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), enable_thinking=False),
    Case(5321, ('Reka-Edge',),
         '<tool_call>\n{"name": "get_time", "arguments": {"city": "XYZCITY"}}</tool_call>',
         calls=[('get_time', '{"city":"XYZCITY"}')], tools=('get_time',), enable_thinking=False),
    Case(5328, ('Reka-Edge',),
         ('I\'m\nthinking\n</think>\n\n<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool'
          '_call>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto', enable_thinking=True),
    Case(5336, ('Reka-Edge',),
         ('<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call><tool_call>\n'
          '{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}</tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), enable_thinking=False, parallel=True),
    Case(5352, ('Reka-Edge',),
         ('I need to call a function\n</think>\n\nLet me check the time.<tool_call>\n'
          '{"name": "get_time", "arguments": {"city": "XYZCITY"}}</tool_call>'),
         content='Let me check the time.', reasoning='I need to call a function',
         calls=[('get_time', '{"city":"XYZCITY"}')], tools=('get_time',), reasoning_format='auto',
         enable_thinking=True),
    Case(5363, ('Reka-Edge',),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg1":',
         calls=[('special_function', '{"arg1": ')], tools=('special_function',), enable_thinking=False,
         partial=True),
    Case(5371, ('Reka-Edge',),
         '<tool_call>\n{"name": "empty_args", "arguments": {}}</tool_call>',
         calls=[('empty_args', '{}')], tools=('empty_args',), enable_thinking=False),
    Case(5378, ('Reka-Edge',),
         '<tool_call>\n{"name": "empty_args_no_schema", "arguments": {}}</tool_call>',
         calls=[('empty_args_no_schema', '{}')], tools=('empty_args_no_schema',), enable_thinking=False),
    Case(5385, ('Reka-Edge',),
         ('Let me think about <tool_call>\n{"name": "special_function", "arguments": {"arg1": 2}}</tool_call> hm'
          'm\n</think>\n\n<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}</tool_call>'),
         reasoning=('Let me think about <tool_call>\n{"name": "special_function", "arguments": {"arg1": 2}}</too'
                    'l_call> hmm'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto',
         enable_thinking=True),
    Case(5398, ('Reka-Edge',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(5408, ('Reka-Edge',),
         " thinking\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(5424, ('Apertus-8B-Instruct',),
         '<|tools_prefix|>[{"special_function": {"arg1": 1}}]<|tools_suffix|>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(5431, ('Apertus-8B-Instruct',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(5443, ('MiniMax-M2',),
         "\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='auto', enable_thinking=True),
    Case(5445, ('MiniMax-M2',),
         "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto',
         enable_thinking=True),
    Case(5447, ('MiniMax-M2',),
         ("Let's call a tool:\n</think>\n\n<minimax:tool_call>\n"
          '<invoke name="empty_args">\n</invoke>\n</minimax:tool_call>'),
         reasoning="Let's call a tool:", calls=[('empty_args', '{}')], tools=('empty_args',),
         reasoning_format='auto', enable_thinking=True),
    Case(5454, ('MiniMax-M2',),
         ('\n</think>\n\n<minimax:tool_call>\n<invoke name="special_function">\n'
          '<parameter name="arg1">1</parameter>\n</invoke>\n</minimax:tool_call>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek'),
    Case(5463, ('MiniMax-M2',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(5473, ('MiniMax-M2',),
         " thinking\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(5495, ('MiniMax-M3',),
         "</mm:think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='auto', enable_thinking=True),
    Case(5503, ('MiniMax-M3',),
         "<mm:think>I'm\nthinking</mm:think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto',
         enable_thinking=True),
    Case(5511, ('MiniMax-M3',),
         ('<mm:think>Let me check the time</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="get_time">]<]minimax[>[<city>Tokyo]<]minimax[>[</city>]<]minimax[>[</invok'
          'e>\n]<]minimax[>[</tool_call>'),
         reasoning='Let me check the time', calls=[('get_time', '{"city": "Tokyo"}')], tools=('get_time',),
         reasoning_format='auto', enable_thinking=True),
    Case(5526, ('MiniMax-M3',),
         ('</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="special_function">]<]minimax[>[<arg1>'
          '1]<]minimax[>[</arg1>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto',
         enable_thinking=True),
    Case(5541, ('MiniMax-M3',),
         ("<mm:think>Let's call a tool:</mm:think>]<]minimax[>[<tool_call>\n"
          ']<]minimax[>[<invoke name="empty_args">]<]minimax[>[</invoke>\n'
          ']<]minimax[>[</tool_call>'),
         reasoning="Let's call a tool:", calls=[('empty_args', '{}')], tools=('empty_args',),
         reasoning_format='auto', enable_thinking=True),
    Case(5555, ('MiniMax-M3',),
         ('<mm:think>Calling both</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="get_time">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invok'
          'e>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>['
          '</invoke>\n]<]minimax[>[</tool_call>'),
         reasoning='Calling both',
         calls=[('get_time', '{"city": "Paris"}'), ('get_weather', '{"city": "Paris"}')],
         tools=('get_time', 'get_weather'), reasoning_format='auto', enable_thinking=True, parallel=True),
    Case(5576, ('MiniMax-M3',),
         ('<mm:think>Thinking about it</mm:think>Let me call the function.]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="special_function">]<]minimax[>[<arg1>1]<]minimax[>[</arg1>]<]minimax[>[</i'
          'nvoke>\n]<]minimax[>[</tool_call>'),
         content='Let me call the function.', reasoning='Thinking about it',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto',
         enable_thinking=True),
    Case(5596, ('MiniMax-M3',),
         ('<mm:think>Test negative</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="magic_int">]<]minimax[>[<ref>-14]<]minimax[>[</ref>]<]minimax[>[</invoke>'
          '\n]<]minimax[>[</tool_call>'),
         reasoning='Test negative', calls=[('magic_int', '{"ref": -14}')], tools=('magic_int',),
         reasoning_format='auto', enable_thinking=True),
    Case(5614, ('MiniMax-M3',),
         ('<mm:think>Test decimal</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="amount">]<]minimax[>[<orig>3.14]<]minimax[>[</orig>]<]minimax[>[</invoke>'
          '\n]<]minimax[>[</tool_call>'),
         reasoning='Test decimal', calls=[('amount', '{"orig": 3.14}')], tools=('amount',),
         reasoning_format='auto', enable_thinking=True),
    Case(5632, ('MiniMax-M3',),
         ('<mm:think>Test boolean</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="toggle">]<]minimax[>[<enabled>true]<]minimax[>[</enabled>]<]minimax[>[</in'
          'voke>\n]<]minimax[>[</tool_call>'),
         reasoning='Test boolean', calls=[('toggle', '{"enabled": true}')], tools=('toggle',),
         reasoning_format='auto', enable_thinking=True),
    Case(5650, ('MiniMax-M3',),
         ('<mm:think>Multi-arg call</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="magic_int">]<]minimax[>[<ref>42]<]minimax[>[</ref>]<]minimax[>[<name>foo b'
          'ar]<]minimax[>[</name>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>'),
         reasoning='Multi-arg call', calls=[('magic_int', '{"ref": 42, "name": "foo bar"}')],
         tools=('magic_int',), reasoning_format='auto', enable_thinking=True),
    Case(5669, ('MiniMax-M3',),
         ('<mm:think>Nested object</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="imaginary_number">]<]minimax[>[<number>]<]minimax[>[<real>1.5]<]minimax[>['
          '</real>]<]minimax[>[<imaginary>-2.5]<]minimax[>[</imaginary>]<]minimax[>[</number>]<]minimax[>[</invo'
          'ke>\n]<]minimax[>[</tool_call>'),
         reasoning='Nested object',
         calls=[('imaginary_number', '{"number": {"real": 1.5, "imaginary": -2.5}}')],
         tools=('imaginary_number',), reasoning_format='auto', enable_thinking=True),
    Case(5690, ('MiniMax-M3',),
         ('<mm:think>Nested arrays</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="nested_args">]<]minimax[>[<tags>]<]minimax[>[<item>alpha]<]minimax[>[</ite'
          'm>]<]minimax[>[<item>beta]<]minimax[>[</item>]<]minimax[>[</tags>]<]minimax[>[<entries>]<]minimax[>[<'
          'item>]<]minimax[>[<id>1]<]minimax[>[</id>]<]minimax[>[<label>one]<]minimax[>[</label>]<]minimax[>[</i'
          'tem>]<]minimax[>[</entries>]<]minimax[>[</invoke>\n'
          ']<]minimax[>[</tool_call>'),
         reasoning='Nested arrays',
         calls=[('nested_args', '{"tags": ["alpha", "beta"], "entries": [{"id": 1, "label": "one"}]}')],
         tools=('nested_args',), reasoning_format='auto', enable_thinking=True),
    Case(5717, ('MiniMax-M3',),
         ('<mm:think>Union array</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="union_args">]<]minimax[>[<filter>]<]minimax[>[<item>alpha]<]minimax[>[</it'
          'em>]<]minimax[>[<item>beta]<]minimax[>[</item>]<]minimax[>[</filter>]<]minimax[>[</invoke>\n'
          ']<]minimax[>[</tool_call>'),
         reasoning='Union array', calls=[('union_args', '{"filter": ["alpha", "beta"]}')],
         tools=('union_args',), reasoning_format='auto', enable_thinking=True),
    Case(5738, ('MiniMax-M3',),
         ('<mm:think>Union scalar</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="union_args">]<]minimax[>[<limit>5]<]minimax[>[</limit>]<]minimax[>[</invok'
          'e>\n]<]minimax[>[</tool_call>'),
         reasoning='Union scalar', calls=[('union_args', '{"limit": 5}')], tools=('union_args',),
         reasoning_format='auto', enable_thinking=True),
    Case(5755, ('MiniMax-M3',),
         ('<mm:think>Union nested</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="union_args">]<]minimax[>[<limit>]<]minimax[>[<max>10]<]minimax[>[</max>]<]'
          'minimax[>[</limit>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>'),
         reasoning='Union nested', calls=[('union_args', '{"limit": {"max": 10}}')], tools=('union_args',),
         reasoning_format='auto', enable_thinking=True),
    Case(5775, ('MiniMax-M3',),
         ('<mm:think>Union string</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="union_args">]<]minimax[>[<label>hi]<]minimax[>[</label>]<]minimax[>[</invo'
          'ke>\n]<]minimax[>[</tool_call>'),
         reasoning='Union string', calls=[('union_args', '{"label": "hi"}')], tools=('union_args',),
         reasoning_format='auto', enable_thinking=True),
    Case(5793, ('MiniMax-M3',),
         ('<mm:think>Union string</mm:think>]<]minimax[>[<tool_call>\n'
          ']<]minimax[>[<invoke name="union_args">]<]minimax[>[<label>]<]minimax[>[<text>hi]<]minimax[>[</text>]'
          '<]minimax[>[</label>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>'),
         reasoning='Union string',
         calls=[('union_args', '{"label": "]<]minimax[>[<text>hi]<]minimax[>[</text>"}')],
         tools=('union_args',), reasoning_format='auto', enable_thinking=True),
    Case(5813, ('MiniMax-M3',),
         ('<mm:think></mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_time">]<]minimax[>[<cit'
          'y>XYZCITY]<]minimax[>[</city>]<]minimax[>[</invoke>\n'
          ']<]minimax[>[</tool_call>'),
         calls=[('get_time', '{"city": "XYZCITY"}')], tools=('get_time',), reasoning_format='auto',
         enable_thinking=True),
    Case(5827, ('MiniMax-M3',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(5837, ('MiniMax-M3',),
         " thinking</mm:think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(5852, ('NVIDIA-Nemotron-Nano-v2',),
         ('I\'m\nthinking\n</think>\n<TOOLCALL>[{"name": "special_function", "arguments": {"arg1": 1}}]</TOOLCAL'
          'L>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto'),
    Case(5858, ('NVIDIA-Nemotron-Nano-v2',),
         ('I\'m\nthinking\n</think>\n\n<TOOLCALL>[{"name": "special_function", "arguments": {"arg1": 1}}]</TOOLC'
          'ALL>\n'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto'),
    Case(5865, ('NVIDIA-Nemotron-Nano-v2',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(5879, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         "<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>",
         content="Hello, world!\nWhat's up?"),
    Case(5880, ('CohereForAI-c4ai-command-r7b-12-2024-tool_use',),
         ("<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
          '    {"tool_call_id": "0", "tool_name": "special_function", "parameters": {"arg1": 1}}\n'
          ']<|END_ACTION|>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1": 1}', '0')],
         tools=('special_function',), reasoning_format='deepseek'),
    Case(5893, ('CohereForAI-c4ai-command-r-plus-tool_use',),
         "<|CHATBOT_TOKEN|>Hello, world!\nWhat's up?<|END_OF_TURN_TOKEN|>",
         content="Hello, world!\nWhat's up?"),
    Case(5895, ('CohereForAI-c4ai-command-r-plus-tool_use',),
         'Action:\n```json\n[{"tool_name": "special_function", "parameters": {"arg1": 1}}]\n```',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(5905, ('CohereForAI-c4ai-command-r-plus-tool_use',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(5916, ('mistralai-Mistral-Nemo-Instruct-2407',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(5917, ('mistralai-Mistral-Nemo-Instruct-2407',),
         '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
         calls=[('special_function', '{"arg1":1}', '123456789')], tools=('special_function',)),
    Case(5924, ('mistralai-Mistral-Nemo-Instruct-2407',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(5933, ('meetkai-functionary-medium-v3.1',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(5934, ('meetkai-functionary-medium-v3.1',),
         '<function=special_function>{"arg1": 1}</function>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(5941, ('meetkai-functionary-medium-v3.1',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(5951, ('meetkai-functionary-medium-v3.2',),
         "all\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(5952, ('meetkai-functionary-medium-v3.2',),
         'special_function\n{"arg1": 1}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(5959, ('meetkai-functionary-medium-v3.2',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(5970, ('fireworks-ai-llama-3-firefunction-v2',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(5971, ('fireworks-ai-llama-3-firefunction-v2',),
         ' functools[{"name": "special_function", "arguments": {"arg1": 1}}]',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(5978, ('fireworks-ai-llama-3-firefunction-v2',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(5990, ('deepseek-ai-DeepSeek-R1-Distill-Llama-8B',),
         "</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='deepseek'),
    Case(5994, ('deepseek-ai-DeepSeek-R1-Distill-Llama-8B',),
         "I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek',
         enable_thinking=True),
    Case(6001, ('deepseek-ai-DeepSeek-R1-Distill-Llama-8B',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(6011, ('deepseek-ai-DeepSeek-R1-Distill-Llama-8B',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(6024, ('llama-cpp-deepseek-r1',),
         "</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='deepseek'),
    Case(6025, ('llama-cpp-deepseek-r1',),
         "I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek'),
    Case(6029, ('llama-cpp-deepseek-r1',),
         ('</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n'
          '```json\n{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek',
         parallel=True),
    Case(6039, ('llama-cpp-deepseek-r1',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(6049, ('llama-cpp-deepseek-r1',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(6063, ('deepseek-ai-DeepSeek-R1-Distill-Qwen-32B',),
         "</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='deepseek', enable_thinking=True),
    Case(6066, ('deepseek-ai-DeepSeek-R1-Distill-Qwen-32B',),
         "I'm\nthinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek'),
    Case(6070, ('deepseek-ai-DeepSeek-R1-Distill-Qwen-32B',),
         ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n'
          '```json\n{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='deepseek',
         enable_thinking=False),
    Case(6080, ('deepseek-ai-DeepSeek-R1-Distill-Qwen-32B',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(6090, ('deepseek-ai-DeepSeek-R1-Distill-Qwen-32B',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(6106, ('MiMo-VL', 'NousResearch-Hermes-3-Llama-3.1-8B-tool_use', 'Qwen-Qwen2.5-7B-Instruct'),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6107, ('MiMo-VL', 'NousResearch-Hermes-3-Llama-3.1-8B-tool_use', 'Qwen-Qwen2.5-7B-Instruct'),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(6114, ('MiMo-VL', 'NousResearch-Hermes-3-Llama-3.1-8B-tool_use', 'Qwen-Qwen2.5-7B-Instruct'),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6125, ('Reka-Edge',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", enable_thinking=False),
    Case(6129, ('Reka-Edge',),
         "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='deepseek',
         enable_thinking=True),
    Case(6134, ('Reka-Edge',),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), enable_thinking=False),
    Case(6139, ('Reka-Edge',),
         ('Hello, world!\nWhat\'s up?\n<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n'
          '</tool_call>'),
         content="Hello, world!\nWhat's up?", calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',), enable_thinking=False),
    Case(6144, ('Reka-Edge',),
         ('I\'m\nthinking\n</think>\n\n<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n'
          '</tool_call>'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(6150, ('Reka-Edge',),
         ('<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n'
          '</tool_call>\n<tool_call>\n{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}'
          '\n</tool_call>'),
         calls=[('special_function', '{"arg1": 1}'), ('special_function_with_opt', '{"arg1": 1, "arg2": 2}')],
         tools=('special_function', 'special_function_with_opt'), enable_thinking=False, parallel=True),
    Case(6159, ('Reka-Edge',),
         '<tool_call>\n{"name": "special_function", "arguments": {"arg',
         calls=[('special_function', '{"arg')], tools=('special_function',), enable_thinking=False,
         partial=True),
    Case(6167, ('Reka-Edge',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(6177, ('Reka-Edge',),
         " thinking\n</think>\n\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(6191, ('unsloth-Apriel-1.5',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6192, ('unsloth-Apriel-1.5',),
         '<tool_calls>[{"name": "special_function", "arguments": {"arg1": 1}}]</tool_calls>',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(6198, ('unsloth-Apriel-1.5',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6211, ('Apriel-1.6-15b-Thinker-fixed',),
         "I'm\nthinking\n[BEGIN FINAL RESPONSE]\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="Here are my reasoning steps:\nI'm\nthinking",
         reasoning_format='auto', enable_thinking=True),
    Case(6219, ('Apriel-1.6-15b-Thinker-fixed',),
         ('I\'m\nthinking\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{"name": "special_function", "arguments": {"arg1'
          '": 1}}]</tool_calls>'),
         reasoning="Here are my reasoning steps:\nI'm\nthinking", calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',), reasoning_format='auto', enable_thinking=True),
    Case(6229, ('Apriel-1.6-15b-Thinker-fixed',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(6239, ('Apriel-1.6-15b-Thinker-fixed',),
         " thinking\n[BEGIN FINAL RESPONSE]\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(6253, ('Mistral-Small-3.2-24B-Instruct-2506',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6254, ('Mistral-Small-3.2-24B-Instruct-2506',),
         '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}',
         calls=[('special_function', '{"arg1":1}', '123456789')], tools=('special_function',)),
    Case(6260, ('Mistral-Small-3.2-24B-Instruct-2506',),
         ('[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}[TOOL_CALLS]special_function_with_opt['
          'CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}'),
         calls=[
              ('special_function', '{"arg1": 1}',
               '000000001'),
              ('special_function_with_opt', '{"arg1": 1, "arg2": 2}',
               '000000002')],
         tools=('special_function', 'special_function_with_opt'), parallel=True),
    Case(6274, ('Mistral-Small-3.2-24B-Instruct-2506',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6284, ('unsloth-mistral-Devstral-Small-2507',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6285, ('unsloth-mistral-Devstral-Small-2507',),
         '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(6290, ('unsloth-mistral-Devstral-Small-2507',),
         'Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
         content="Hello, world!\nWhat's up?", calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',)),
    Case(6300, ('meta-llama-Llama-3.1-8B-Instruct',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", tools=('special_function',)),
    Case(6302, ('meta-llama-Llama-3.1-8B-Instruct',),
         '```json\n"42"\n```',
         content='"42"', reasoning_format='auto', json_schema={'const': '42'}),
    Case(6309, ('meta-llama-Llama-3.1-8B-Instruct',),
         '"42"\n',
         content='"42"', reasoning_format='auto', json_schema={'const': '42'}),
    Case(6317, ('meta-llama-Llama-3.1-8B-Instruct',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6328, ('meta-llama-Llama-3.2-3B-Instruct',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", tools=('special_function',)),
    Case(6331, ('meta-llama-Llama-3.2-3B-Instruct',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6342, ('meta-llama-Llama-3.3-70B-Instruct',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", tools=('python',)),
    Case(6345, ('meta-llama-Llama-3.3-70B-Instruct',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6365, ('muse-glimmer',),
         " to=user<|message|>Hello, world!\nWhat's up?<|eot|>",
         content="Hello, world!\nWhat's up?", reasoning_format='auto'),
    Case(6372, ('muse-glimmer',),
         (' to=special_function<|message|><atem:function_calls>\n'
          '<atem:invoke name="special_function">\n<atem:parameter name="arg1">1</atem:parameter>\n'
          '</atem:invoke>\n</atem:function_calls>'),
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto'),
    Case(6380, ('muse-glimmer',),
         (" to=user<|message|>Hello, world!\nWhat's up?<|eom|><|start|>assistant to=special_function<|message|><"
          'atem:function_calls>\n<atem:invoke name="special_function">\n'
          '<atem:parameter name="arg1">1</atem:parameter>\n</atem:invoke>\n'
          '</atem:function_calls>'),
         content="Hello, world!\nWhat's up?", calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',), reasoning_format='auto'),
    Case(6391, ('muse-glimmer',),
         (' to=user<|message|>You invoke it like this:\n<atem:function_calls>\n'
          '<atem:invoke name="special_function">\n<atem:parameter name="arg1">1</atem:parameter>\n'
          '</atem:invoke>\n</atem:function_calls><|eot|>'),
         content=('You invoke it like this:\n<atem:function_calls>\n'
                  '<atem:invoke name="special_function">\n<atem:parameter name="arg1">1</atem:parameter>\n'
                  '</atem:invoke>\n</atem:function_calls>'),
         tools=('special_function',), reasoning_format='auto'),
    Case(6398, ('muse-glimmer',),
         ' to=user<|message|>{"amount": 123.45, "date": "2025-12-03"}',
         content='{"amount": 123.45, "date": "2025-12-03"}', reasoning_format='auto',
         json_schema={'type': 'object', 'properties': {'amount': {'type': 'number'}, 'date': {'type': 'string'}}}),
    Case(6405, ('muse-glimmer',),
         (' to=self<|message|>I need to output the invoice details in JSON<|eom|><|start|>assistant to=user<|mes'
          'sage|>{"amount": 123.45, "date": "2025-12-03"}'),
         content='{"amount": 123.45, "date": "2025-12-03"}',
         reasoning='I need to output the invoice details in JSON', reasoning_format='auto',
         json_schema={'type': 'object', 'properties': {'amount': {'type': 'number'}, 'date': {'type': 'string'}}}),
    Case(6414, ('muse-glimmer',),
         (' to=self<|message|>I could use <atem:function_calls>\n'
          '<atem:invoke name="special_function">\n<atem:parameter name="arg1">1</atem:parameter>\n'
          '</atem:invoke>\n</atem:function_calls> here<|eom|><|start|>assistant to=user<|message|>Hello!<|eot|>'),
         content='Hello!',
         reasoning=('I could use <atem:function_calls>\n<atem:invoke name="special_function">\n'
                    '<atem:parameter name="arg1">1</atem:parameter>\n'
                    '</atem:invoke>\n</atem:function_calls> here'),
         tools=('special_function',), reasoning_format='auto'),
    Case(6428, ('openai-gpt-oss-120b',),
         "<|channel|>final<|message|>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6431, ('openai-gpt-oss-120b',),
         "<|channel|>commentary<|message|>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6434, ('openai-gpt-oss-120b',),
         ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello,"
          " world!\nWhat's up?"),
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto'),
    Case(6442, ('openai-gpt-oss-120b',),
         ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello,"
          " world!\nWhat's up?"),
         content="<|channel|>analysis<|message|>I'm\nthinking<|end|>Hello, world!\nWhat's up?",
         reasoning_format='none'),
    Case(6450, ('openai-gpt-oss-120b',),
         "<|channel|>analysis<|message|>I'm\nthinking",
         reasoning="I'm\nthinking", reasoning_format='auto', partial=True),
    Case(6457, ('openai-gpt-oss-120b',),
         ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto'),
    Case(6464, ('openai-gpt-oss-120b',),
         '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto'),
    Case(6471, ('openai-gpt-oss-120b',),
         ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto'),
    Case(6478, ('openai-gpt-oss-120b',),
         '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',), reasoning_format='auto'),
    Case(6485, ('openai-gpt-oss-120b',),
         ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function<|c"
          'hannel|>analysis<|message|>{"arg1": 1}'),
         reasoning="I'm\nthinking", calls=[('special_function', '{"arg1":1}')], tools=('special_function',),
         reasoning_format='auto'),
    Case(6494, ('openai-gpt-oss-120b',),
         ('<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to'
          '=functions.edit <|constrain|>json<|message|>{"oldString": "if (part < railCount - 1) {", "newString":'
          ' "if (part < 4) {", "replaceAll": false}'),
         reasoning='Thinking about edit...',
         calls=[
              ('edit', ('{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAl'
                        'l": false}'))],
         tools=('edit',), reasoning_format='auto'),
    Case(6531, ('openai-gpt-oss-120b',),
         ('<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant<|'
          'channel|>final <|constrain|>json<|message|>{"amount": 123.45, "date": "2025-12-03"}'),
         content='{"amount": 123.45, "date": "2025-12-03"}',
         reasoning='I need to output the invoice details in JSON', reasoning_format='auto',
         json_schema={'type': 'object', 'properties': {'amount': {'type': 'number'}, 'date': {'type': 'string'}}}),
    Case(6547, ('openai-gpt-oss-120b',),
         ('<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=containe'
          'r.exec<|channel|>commentary<|message|>python3 -c \'print("hello")\''),
         reasoning='I will execute python to say hello', reasoning_format='auto'),
    Case(6556, ('openai-gpt-oss-120b',),
         ('<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>c'
          'ommentary to=python <|constrain|>code<|message|>print("hello")'),
         reasoning='I will execute python to say hello', reasoning_format='auto'),
    Case(6567, ('openai-gpt-oss-120b',),
         ("<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\n"
          'thinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\n'
          "What's up?"),
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto'),
    Case(6575, ('openai-gpt-oss-120b',),
         ("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary to=assistan"
          "t<|channel|>final<|message|>Hello, world!\nWhat's up?"),
         content="Hello, world!\nWhat's up?", reasoning="I'm\nthinking", reasoning_format='auto'),
    Case(6583, ('openai-gpt-oss-120b',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_content'),
    Case(6593, ('openai-gpt-oss-120b',),
         " thinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
    Case(6607, ('StepFun3.5-Flash',),
         "I was thinking\n</think>\nNow I'm not.",
         content="Now I'm not.", reasoning='I was thinking', reasoning_format='deepseek', enable_thinking=True),
    Case(6615, ('StepFun3.5-Flash',),
         ('Let me call the magic tool\n</think>\n<tool_call>\n'
          '<function=magic>\n<parameter=name>\nfooBar\n</parameter>\n'
          '<parameter=ref>\n5123123\n</parameter>\n</function>\n'
          '</tool_call>'),
         reasoning='Let me call the magic tool', calls=[('magic', '{"name": "fooBar", "ref": "5123123"}')],
         tools=('magic',), reasoning_format='deepseek', enable_thinking=True),
    Case(6634, ('StepFun3.5-Flash',),
         ('Let me call the special function\n</think>\n<tool_call>\n'
          '<function=special_function>\n<parameter=arg1>\n42555916\n'
          '</parameter>\n</function>\n</tool_call>'),
         reasoning='Let me call the special function', calls=[('special_function', '{"arg1": 42555916}')],
         tools=('special_function',), reasoning_format='deepseek', enable_thinking=True),
    Case(6651, ('StepFun3.5-Flash',),
         ('Let me call the special function with opt\n</think>\n'
          '<tool_call>\n<function=special_function_with_opt>\n'
          '<parameter=arg1>\n42555916\n</parameter>\n</function>\n'
          '</tool_call>'),
         reasoning='Let me call the special function with opt',
         calls=[('special_function_with_opt', '{"arg1": 42555916}')], tools=('special_function_with_opt',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(6668, ('StepFun3.5-Flash',),
         ('Let me call the magic_int function\n</think>\n<tool_call>\n'
          '<function=magic_int>\n<parameter=ref>\n42555916\n</parameter>\n'
          '<parameter=name>\nbaz\n</parameter>\n</function>\n'
          '</tool_call>'),
         reasoning='Let me call the magic_int function',
         calls=[('magic_int', '{"ref": 42555916, "name": "baz"}')], tools=('magic_int',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(6686, ('StepFun3.5-Flash',),
         ('Call string_param with empty text\n</think>\n<tool_call>\n'
          '<function=string_param>\n<parameter=text>\n\n</parameter>\n'
          '</function>\n</tool_call>'),
         reasoning='Call string_param with empty text', calls=[('string_param', '{"text": ""}')],
         tools=('string_param',), reasoning_format='deepseek', enable_thinking=True),
    Case(6703, ('StepFun3.5-Flash',),
         ('Test simple quoted unquoted\n</think>\n<tool_call>\n'
          '<function=quoted_unquoted>\n<parameter=quoted>\n"foo"\n'
          '</parameter>\n<parameter=unquoted>\nfoo\n</parameter>\n'
          '</function>\n</tool_call>'),
         reasoning='Test simple quoted unquoted',
         calls=[('quoted_unquoted', '{"quoted": "\\"foo\\"", "unquoted": "foo"}')], tools=('quoted_unquoted',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(6721, ('StepFun3.5-Flash',),
         ('Test complex quoted unquoted\n</think>\n<tool_call>\n'
          '<function=quoted_unquoted>\n<parameter=quoted>\n"printf(\\"foo\\");"\n'
          '</parameter>\n<parameter=unquoted>\nprintf("foo");\n'
          '</parameter>\n</function>\n</tool_call>'),
         reasoning='Test complex quoted unquoted',
         calls=[
              ('quoted_unquoted', ('{ "quoted" : "\\"printf(\\\\\\"foo\\\\\\");\\"", "unquoted": "printf(\\"foo'
                                   '\\");" }'))],
         tools=('quoted_unquoted',), reasoning_format='deepseek', enable_thinking=True),
    Case(6739, ('StepFun3.5-Flash',),
         ('Test negative number\n</think>\n<tool_call>\n<function=magic_int>\n'
          '<parameter=ref>\n-14\n</parameter>\n</function>\n</tool_call>'),
         reasoning='Test negative number', calls=[('magic_int', '{ "ref" : -14 }')], tools=('magic_int',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(6756, ('StepFun3.5-Flash',),
         ('Test decimal number\n</think>\n<tool_call>\n<function=amount>\n'
          '<parameter=orig>\n3.14\n</parameter>\n</function>\n'
          '</tool_call>'),
         reasoning='Test decimal number', calls=[('amount', '{ "orig" : 3.14 }')], tools=('amount',),
         reasoning_format='deepseek', enable_thinking=True),
    Case(6773, ('StepFun3.5-Flash',),
         ('Test imaginary number\n</think>\n<tool_call>\n<function=imaginary_number>\n'
          '<parameter=number>\n{ "real": 3.14, "imaginary": 2.71 }\n'
          '</parameter>\n</function>\n</tool_call>'),
         reasoning='Test imaginary number',
         calls=[('imaginary_number', '{ "number" : {"real":3.14,"imaginary":2.71 } }')],
         tools=('imaginary_number',), reasoning_format='deepseek', enable_thinking=True),
    Case(6793, ('StepFun3.5-Flash',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_content'),
    Case(6803, ('StepFun3.5-Flash',),
         " thinking\n</think>\nHello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='deepseek',
         enable_thinking=True, history='prefill_reasoning'),
    Case(6817, ('GigaChat3-10B-A1.8B',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6818, ('GigaChat3-10B-A1.8B',),
         '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "special_function", "arguments": {"arg1": 1}}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(6824, ('GigaChat3-10B-A1.8B',),
         ("Hello, world!\nWhat's up?<|message_sep|>\n\nfunction call<|role_sep|>\n"
          '{"name": "special_function", "arguments": {"arg1": 1}}'),
         content="Hello, world!\nWhat's up?", calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',)),
    Case(6834, ('GigaChat3-10B-A1.8B',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6845, ('GigaChat3.1-10B-A1.8B',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?"),
    Case(6846, ('GigaChat3.1-10B-A1.8B',),
         '<|function_call|>{"name": "special_function", "arguments": {"arg1": 1}}',
         calls=[('special_function', '{"arg1": 1}')], tools=('special_function',)),
    Case(6852, ('GigaChat3.1-10B-A1.8B',),
         'Hello, world!\nWhat\'s up?<|function_call|>{"name": "special_function", "arguments": {"arg1": 1}}',
         content="Hello, world!\nWhat's up?", calls=[('special_function', '{"arg1":1}')],
         tools=('special_function',)),
    Case(6862, ('GigaChat3.1-10B-A1.8B',),
         "world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", history='prefill_content'),
    Case(6874, ('openbmb-MiniCPM5-1B',),
         "Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning_format='auto', enable_thinking=False),
    Case(6880, ('openbmb-MiniCPM5-1B',),
         '<function name="python"><param name="code">print(\'Hello, World!\')</param></function>',
         calls=[('python', '{"code": "print(\'Hello, World!\')"}')], tools=('python',),
         reasoning_format='auto', enable_thinking=False),
    Case(6887, ('openbmb-MiniCPM5-1B',),
         '<function name="empty_args"></function>',
         calls=[('empty_args', '{}')], tools=('empty_args',), reasoning_format='auto', enable_thinking=False),
    Case(6894, ('openbmb-MiniCPM5-1B',),
         '<function name="python"><param name="code">print(\'x\')</param></function>',
         calls=[('python', '{"code": "print(\'x\')"}')], tools=('python',), reasoning_format='auto',
         enable_thinking=False, parallel=True),
    Case(6903, ('openbmb-MiniCPM5-1B',),
         ('<function name="html"><param name="markup"><![CDATA[<a href="/x">hi</a> </param>]]></param></function'
          '>'),
         calls=[('html', '{"markup": "<a href=\\"/x\\">hi</a> </param>"}')], tools=('html',),
         reasoning_format='auto', enable_thinking=False),
    Case(6910, ('openbmb-MiniCPM5-1B',),
         'I\'m thinking</think><function name="python"><param name="code">print(\'hey\')</param></function>',
         reasoning="I'm thinking", calls=[('python', '{"code": "print(\'hey\')"}')], tools=('python',),
         reasoning_format='auto', enable_thinking=True),
    Case(6918, ('openbmb-MiniCPM5-1B',),
         ('<function name="python"><param name="code">print(\'x\')</param></function>\n'
          '<function name="python"><param name="code">print(\'y\')</param></function>'),
         calls=[('python', '{"code": "print(\'x\')"}'), ('python', '{"code": "print(\'y\')"}')],
         tools=('python',), reasoning_format='auto', enable_thinking=False, parallel=True),
    Case(6930, ('openbmb-MiniCPM5-1B',),
         " thinking</think>Hello, world!\nWhat's up?",
         content="Hello, world!\nWhat's up?", reasoning="I'm thinking", reasoning_format='auto',
         enable_thinking=True, history='prefill_reasoning'),
]


USER = Message("user", "Hey there!")
_TODO_CALL = {"id": "call_todos", "type": "function", "function": {
    "name": "manage_todo_list", "arguments": '{"todos":[{"item":"Inspect repository","selected":false}]}'}}
#: llama.cpp's message histories: (messages, the prefill's content, the prefill's reasoning)
HISTORIES: dict[str, tuple[list[Message], str, str]] = {
    "prefill_content": ([USER, Message("assistant", "Hello, ", reasoning_content="I'm thinking")],
                        "Hello, ", "I'm thinking"),
    "prefill_reasoning": ([USER, Message("assistant", "", reasoning_content="I'm")], "", "I'm"),
    "prefill_thinking": ([USER, Message("assistant", "", reasoning_content="I'm thinking")], "", "I'm thinking"),
    "todo_history": ([Message("user", "Create a todo list, then inspect the repository."),
                      Message("assistant", "", tool_calls=[_TODO_CALL]),
                      Message("tool", "Successfully wrote todo list", tool_call_id="call_todos"),
                      Message("user", "Proceed.")], "", ""),
}

#: (stem, line) -> why we differ from llama.cpp there (the case is a strict xfail)
DIFFERENCES: dict[tuple[str, int], str] = {
    **{(stem, 2116): "LFM2 sends each call whole (docs/guides/tools.md), not its name before its arguments"
       for stem in ("LFM2-8B-A1B", "LFM2.5-Instruct", "LFM2.5-8B-A1B")},
    **{(stem, line): "a Command R7B call opens once its header is read up to its parameters, not at its name"
       for stem, line in (("CohereForAI-c4ai-command-r7b-12-2024-tool_use", 2847), ("Cohere2MoE", 2962))},
    **{(stem, line): "our response_format grammar admits the bare JSON only: no ```json fence to strip"
       for stem, line in (("mistralai-Ministral-3-14B-Reasoning-2512", 2648),
                          ("meta-llama-Llama-3.1-8B-Instruct", 6302))},
    **{(stem, line): "the template renders no tools: we emulate them (TOOL_CALL lines, docs/guides/tools.md), so the "
       "family's own call syntax is text"
       for stem, line in (("deepseek-ai-DeepSeek-V3.1", 3920), ("deepseek-ai-DeepSeek-V3.1", 3953),
                          ("deepseek-ai-DeepSeek-V3.1", 3965), ("llama-cpp-deepseek-r1", 6029),
                          ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", 6070))},
    **{("inclusionai-ling-3.0-flash", line): "<|role_end|> ends Ling's turn: generation stops on it, no parser "
       "sees it" for line in (4742, 4748)},
    ("MiniMax-M3", 5793): "an argument written as nested tags is an object to us even where the schema also allows "
    "a string (llama.cpp keeps the tags as the string)",
}

def _tmpl(stem: str) -> PreparedTemplate:
    return fixture_template(stem)  # type: ignore[no-any-return]


def _request(case: Case) -> ChatCompletionRequest:
    messages = HISTORIES[case.history][0] if case.history else [USER]
    tools = [{"type": "function", "function": {"name": name, "description": name, "parameters": TOOL_PARAMS[name]}}
             for name in case.tools]
    response_format = None
    if case.json_schema is not None:
        response_format = ResponseFormat("json_schema", json_schema=JsonSchemaFormat(name="s", schema=case.json_schema))
    return ChatCompletionRequest(messages=messages, tools=tools or None, tool_choice=case.tool_choice,
                                 parallel_tool_calls=case.parallel, reasoning_format=case.reasoning_format,
                                 enable_thinking=case.enable_thinking, response_format=response_format,
                                 continue_final_message=case.continuation)


def _expected(case: Case) -> tuple[str, str]:
    """The expected content and reasoning, less what a continued content already held (a continued
    reasoning stays: it begins our reply's reasoning_content too)."""
    content, reasoning = case.content, case.reasoning
    if case.history:
        _, prefill_content, prefill_reasoning = HISTORIES[case.history]
        content = content.removeprefix(prefill_content)
        if prefill_content or case.continuation == "content":
            reasoning = reasoning.removeprefix(prefill_reasoning)
    return content, reasoning


def _parse(case: Case, stem: str, pieces: list[str]) -> tuple[str, str, list[tuple[str, str, str]]]:
    counter = itertools.count()
    parser = make_output_parser(render_chat(_tmpl(stem), _request(case)).plan)
    if hasattr(parser, "_top"):  # deterministic ids
        parser._top.inner.id_factory = lambda: f"call_{next(counter)}"
    deltas = [d for piece in pieces for d in parser.feed(piece)]
    if case.partial:  # what was streamed so far
        calls: dict[int, list[str]] = {}
        for d in deltas:
            for tc in d.tool_calls:
                calls.setdefault(tc.index, [tc.id or "", tc.name or "", ""])[2] += tc.arguments
        return ("".join(d.content for d in deltas), "".join(d.reasoning_content for d in deltas),
                [(name, args, call_id) for call_id, name, args in calls.values()])
    tail, msg = parser.finish()
    check_invariant(deltas + tail, msg)
    return msg.content, msg.reasoning_content, [(c.name, c.arguments, c.id) for c in msg.tool_calls]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None  # llama.cpp compares partial arguments as "" too


def _check(case: Case, stem: str, pieces: list[str]) -> None:
    content, reasoning, calls = _parse(case, stem, pieces)
    want_content, want_reasoning = _expected(case)
    assert content.strip() == want_content.strip()
    assert reasoning.strip() == want_reasoning.strip()
    assert [(n, _json(a)) for n, a, _ in calls] == [(c[0], _json(c[1])) for c in case.calls]
    for (_, _, call_id), want in zip(calls, case.calls, strict=True):
        if len(want) > 2 and want[2].startswith("functions."):  # the model's own id (Kimi K2)
            assert call_id == want[2]


def _params() -> list[Any]:
    out = []
    for case in CASES:
        for stem in case.stems:
            reason = DIFFERENCES.get((stem, case.line))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(case, stem, id=f"{stem}-{case.line}", marks=marks))
    return out


@pytest.mark.parametrize(("case", "stem"), _params())
def test_llama_cpp_case_parses_alike_whole_and_streamed(case: Case, stem: str) -> None:
    _check(case, stem, [case.text])
    _check(case, stem, list(case.text))
