//! Snapshot tables of the four wire formats: for each provider, one table of cases
//! — the tools, every tool choice, what the sample responses decode to, the history they leave and
//! the results sent back — each compared as a whole. `UPDATE_EXPECT=1 cargo test -p
//! toolplane-model --test integration wire_snapshots` rewrites the expectations after a deliberate change.
// Test code: a panic with its message is the failure report, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use expect_test::{Expect, expect};
use toolplane_model::ProviderFormat;

fn check(format: ProviderFormat, table: &[(&str, Expect)]) {
    // The samples we feed in are SDK-checked fixtures, not outputs; they are not snapshotted here.
    let outputs: Vec<common::Output> = common::outputs(format)
        .into_iter()
        .filter(|o| o.kind != "input")
        .collect();
    let names: Vec<String> = outputs.iter().map(common::Output::name).collect();
    let listed: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names, listed,
        "the table must list every output of {format}, in order"
    );
    for (output, (_, expected)) in outputs.iter().zip(table) {
        expected.assert_eq(&serde_json::to_string_pretty(&output.value).unwrap());
    }
}

#[test]
fn openai_chat() {
    check(
        ProviderFormat::OpenAiChat,
        &[
            (
                "tools__all",
                expect![[r#"
                [
                  {
                    "type": "function",
                    "function": {
                      "name": "dice_roll",
                      "description": "Roll dice in common notation: \"d6\", \"1d20\", \"3d6+4\", \"2d10-1\". Returns each die and the total.",
                      "parameters": {
                        "type": "object",
                        "properties": {
                          "notation": {
                            "type": "string",
                            "description": "Dice notation, e.g. \"3d6+4\"."
                          }
                        },
                        "required": [
                          "notation"
                        ],
                        "additionalProperties": false
                      }
                    }
                  },
                  {
                    "type": "function",
                    "function": {
                      "name": "mcp__github__create_issue",
                      "description": "Create an issue in a GitHub repository.",
                      "parameters": {
                        "$schema": "https://json-schema.org/draft/2020-12/schema",
                        "type": "object",
                        "properties": {
                          "title": {
                            "type": "string",
                            "minLength": 1
                          },
                          "labels": {
                            "type": "array",
                            "items": {
                              "type": "string"
                            },
                            "default": []
                          },
                          "priority": {
                            "anyOf": [
                              {
                                "type": "integer",
                                "minimum": 1
                              },
                              {
                                "type": "null"
                              }
                            ]
                          }
                        },
                        "required": [
                          "title"
                        ],
                        "additionalProperties": false
                      }
                    }
                  },
                  {
                    "type": "function",
                    "function": {
                      "name": "mcp__github__ping",
                      "parameters": {
                        "type": "object"
                      }
                    }
                  }
                ]"#]],
            ),
            ("tool_choice__none", expect![[r#""none""#]]),
            ("tool_choice__auto", expect![[r#""auto""#]]),
            ("tool_choice__required", expect![[r#""required""#]]),
            (
                "tool_choice__specific",
                expect![[r#"
                {
                  "type": "function",
                  "function": {
                    "name": "mcp__github__create_issue"
                  }
                }"#]],
            ),
            (
                "decoded__response",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "call_7Gx2",
                      "toolId": "builtin:dice.roll",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "notation": "3d6+4"
                        }
                      }
                    },
                    {
                      "callId": "call_Q9d1",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:create_issue",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "title": "Dice are loaded",
                          "labels": [
                            "bug"
                          ]
                        }
                      }
                    }
                  ],
                  "assistantText": "Rolling first, then filing the issue."
                }"#]],
            ),
            (
                "history__response",
                expect![[r#"
                [
                  {
                    "role": "assistant",
                    "content": "Rolling first, then filing the issue.",
                    "tool_calls": [
                      {
                        "id": "call_7Gx2",
                        "type": "function",
                        "function": {
                          "name": "dice_roll",
                          "arguments": "{\"notation\":\"3d6+4\"}"
                        }
                      },
                      {
                        "id": "call_Q9d1",
                        "type": "function",
                        "function": {
                          "name": "mcp__github__create_issue",
                          "arguments": "{\"title\":\"Dice are loaded\",\"labels\":[\"bug\"]}"
                        }
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "results__response",
                expect![[r###"
                [
                  {
                    "role": "tool",
                    "tool_call_id": "call_7Gx2",
                    "content": "3d6+4: 4 + 2 + 6 + 4 = 16"
                  },
                  {
                    "role": "tool",
                    "tool_call_id": "call_Q9d1",
                    "content": "## Tool error\n\n`labels` must name existing labels; `bug` does not exist. Call without `labels` or use `triage`."
                  }
                ]"###]],
            ),
            (
                "decoded__assistant",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "call_p1",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:ping",
                      "arguments": {
                        "kind": "object",
                        "value": {}
                      }
                    }
                  ],
                  "assistantText": null
                }"#]],
            ),
            (
                "history__assistant",
                expect![[r#"
                [
                  {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [
                      {
                        "id": "call_p1",
                        "type": "function",
                        "function": {
                          "name": "mcp__github__ping",
                          "arguments": "{}"
                        }
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "results__assistant",
                expect![[r#"
                [
                  {
                    "role": "tool",
                    "tool_call_id": "call_p1",
                    "content": ""
                  }
                ]"#]],
            ),
            (
                "trimmed__history",
                expect![[r#"
                [
                  {
                    "role": "user",
                    "content": "Roll the dice."
                  },
                  {
                    "role": "user",
                    "content": "[1 earlier turn(s) of this conversation were removed to fit the context window. Their tool results are still stored under `tool-results/`.]"
                  },
                  {
                    "role": "assistant",
                    "content": "Rolling first, then filing the issue.",
                    "tool_calls": [
                      {
                        "id": "call_7Gx2",
                        "type": "function",
                        "function": {
                          "name": "dice_roll",
                          "arguments": "{\"notation\":\"3d6+4\"}"
                        }
                      },
                      {
                        "id": "call_Q9d1",
                        "type": "function",
                        "function": {
                          "name": "mcp__github__create_issue",
                          "arguments": "{\"title\":\"Dice are loaded\",\"labels\":[\"bug\"]}"
                        }
                      }
                    ]
                  },
                  {
                    "role": "tool",
                    "tool_call_id": "call_7Gx2",
                    "content": "[This tool result (25 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/call_7Gx2.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]"
                  },
                  {
                    "role": "tool",
                    "tool_call_id": "call_Q9d1",
                    "content": "[This tool result (111 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/call_Q9d1.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]"
                  }
                ]"#]],
            ),
        ],
    );
}

#[test]
fn openai_responses() {
    check(
        ProviderFormat::OpenAiResponses,
        &[
            (
                "tools__all",
                expect![[r#"
                [
                  {
                    "type": "function",
                    "name": "dice_roll",
                    "description": "Roll dice in common notation: \"d6\", \"1d20\", \"3d6+4\", \"2d10-1\". Returns each die and the total.",
                    "parameters": {
                      "type": "object",
                      "properties": {
                        "notation": {
                          "type": "string",
                          "description": "Dice notation, e.g. \"3d6+4\"."
                        }
                      },
                      "required": [
                        "notation"
                      ],
                      "additionalProperties": false
                    },
                    "strict": false
                  },
                  {
                    "type": "function",
                    "name": "mcp__github__create_issue",
                    "description": "Create an issue in a GitHub repository.",
                    "parameters": {
                      "$schema": "https://json-schema.org/draft/2020-12/schema",
                      "type": "object",
                      "properties": {
                        "title": {
                          "type": "string",
                          "minLength": 1
                        },
                        "labels": {
                          "type": "array",
                          "items": {
                            "type": "string"
                          },
                          "default": []
                        },
                        "priority": {
                          "anyOf": [
                            {
                              "type": "integer",
                              "minimum": 1
                            },
                            {
                              "type": "null"
                            }
                          ]
                        }
                      },
                      "required": [
                        "title"
                      ],
                      "additionalProperties": false
                    },
                    "strict": false
                  },
                  {
                    "type": "function",
                    "name": "mcp__github__ping",
                    "parameters": {
                      "type": "object"
                    },
                    "strict": false
                  }
                ]"#]],
            ),
            ("tool_choice__none", expect![[r#""none""#]]),
            ("tool_choice__auto", expect![[r#""auto""#]]),
            ("tool_choice__required", expect![[r#""required""#]]),
            (
                "tool_choice__specific",
                expect![[r#"
                {
                  "type": "function",
                  "name": "mcp__github__create_issue"
                }"#]],
            ),
            (
                "decoded__response",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "call_r1",
                      "toolId": "builtin:dice.roll",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "notation": "3d6+4"
                        }
                      },
                      "providerMetadata": {
                        "itemId": "fc_68af0"
                      }
                    },
                    {
                      "callId": "call_r2",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:create_issue",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "title": "Dice are loaded",
                          "labels": [
                            "bug"
                          ]
                        }
                      },
                      "providerMetadata": {
                        "itemId": "fc_68af1"
                      }
                    }
                  ],
                  "assistantText": "Rolling first, then filing the issue."
                }"#]],
            ),
            (
                "history__response",
                expect![[r#"
                [
                  {
                    "type": "reasoning",
                    "id": "rs_68af",
                    "summary": []
                  },
                  {
                    "type": "message",
                    "id": "msg_68af",
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                      {
                        "type": "output_text",
                        "text": "Rolling first, then filing the issue.",
                        "annotations": []
                      }
                    ]
                  },
                  {
                    "type": "function_call",
                    "id": "fc_68af0",
                    "name": "dice_roll",
                    "arguments": "{\"notation\":\"3d6+4\"}",
                    "status": "completed",
                    "call_id": "call_r1"
                  },
                  {
                    "type": "function_call",
                    "id": "fc_68af1",
                    "name": "mcp__github__create_issue",
                    "arguments": "{\"title\":\"Dice are loaded\",\"labels\":[\"bug\"]}",
                    "status": "completed",
                    "call_id": "call_r2"
                  }
                ]"#]],
            ),
            (
                "results__response",
                expect![[r###"
                [
                  {
                    "type": "function_call_output",
                    "call_id": "call_r1",
                    "output": "3d6+4: 4 + 2 + 6 + 4 = 16"
                  },
                  {
                    "type": "function_call_output",
                    "call_id": "call_r2",
                    "output": "## Tool error\n\n`labels` must name existing labels; `bug` does not exist. Call without `labels` or use `triage`."
                  }
                ]"###]],
            ),
            (
                "decoded__assistant",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "call_p1",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:ping",
                      "arguments": {
                        "kind": "object",
                        "value": {}
                      },
                      "providerMetadata": {
                        "itemId": "fc_68af0"
                      }
                    }
                  ],
                  "assistantText": null
                }"#]],
            ),
            (
                "history__assistant",
                expect![[r#"
                [
                  {
                    "type": "function_call",
                    "id": "fc_68af0",
                    "name": "mcp__github__ping",
                    "arguments": "{}",
                    "status": "completed",
                    "call_id": "call_p1"
                  }
                ]"#]],
            ),
            (
                "results__assistant",
                expect![[r#"
                [
                  {
                    "type": "function_call_output",
                    "call_id": "call_p1",
                    "output": ""
                  }
                ]"#]],
            ),
            (
                "trimmed__history",
                expect![[r#"
                [
                  {
                    "role": "user",
                    "content": "Roll the dice."
                  },
                  {
                    "role": "user",
                    "content": "[1 earlier turn(s) of this conversation were removed to fit the context window. Their tool results are still stored under `tool-results/`.]"
                  },
                  {
                    "type": "reasoning",
                    "id": "rs_68af",
                    "summary": []
                  },
                  {
                    "type": "message",
                    "id": "msg_68af",
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                      {
                        "type": "output_text",
                        "text": "Rolling first, then filing the issue.",
                        "annotations": []
                      }
                    ]
                  },
                  {
                    "type": "function_call",
                    "id": "fc_68af0",
                    "name": "dice_roll",
                    "arguments": "{\"notation\":\"3d6+4\"}",
                    "status": "completed",
                    "call_id": "call_r1"
                  },
                  {
                    "type": "function_call",
                    "id": "fc_68af1",
                    "name": "mcp__github__create_issue",
                    "arguments": "{\"title\":\"Dice are loaded\",\"labels\":[\"bug\"]}",
                    "status": "completed",
                    "call_id": "call_r2"
                  },
                  {
                    "type": "function_call_output",
                    "call_id": "call_r1",
                    "output": "[This tool result (25 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/call_r1.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]"
                  },
                  {
                    "type": "function_call_output",
                    "call_id": "call_r2",
                    "output": "[This tool result (111 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/call_r2.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]"
                  }
                ]"#]],
            ),
        ],
    );
}

#[test]
fn anthropic_messages() {
    check(
        ProviderFormat::AnthropicMessages,
        &[
            (
                "tools__all",
                expect![[r#"
                [
                  {
                    "name": "dice_roll",
                    "description": "Roll dice in common notation: \"d6\", \"1d20\", \"3d6+4\", \"2d10-1\". Returns each die and the total.",
                    "input_schema": {
                      "type": "object",
                      "properties": {
                        "notation": {
                          "type": "string",
                          "description": "Dice notation, e.g. \"3d6+4\"."
                        }
                      },
                      "required": [
                        "notation"
                      ],
                      "additionalProperties": false
                    }
                  },
                  {
                    "name": "mcp__github__create_issue",
                    "description": "Create an issue in a GitHub repository.",
                    "input_schema": {
                      "$schema": "https://json-schema.org/draft/2020-12/schema",
                      "type": "object",
                      "properties": {
                        "title": {
                          "type": "string",
                          "minLength": 1
                        },
                        "labels": {
                          "type": "array",
                          "items": {
                            "type": "string"
                          },
                          "default": []
                        },
                        "priority": {
                          "anyOf": [
                            {
                              "type": "integer",
                              "minimum": 1
                            },
                            {
                              "type": "null"
                            }
                          ]
                        }
                      },
                      "required": [
                        "title"
                      ],
                      "additionalProperties": false
                    }
                  },
                  {
                    "name": "mcp__github__ping",
                    "input_schema": {
                      "type": "object"
                    }
                  }
                ]"#]],
            ),
            (
                "tool_choice__none",
                expect![[r#"
                {
                  "type": "none"
                }"#]],
            ),
            (
                "tool_choice__auto",
                expect![[r#"
                {
                  "type": "auto"
                }"#]],
            ),
            (
                "tool_choice__required",
                expect![[r#"
                {
                  "type": "any"
                }"#]],
            ),
            (
                "tool_choice__specific",
                expect![[r#"
                {
                  "type": "tool",
                  "name": "mcp__github__create_issue"
                }"#]],
            ),
            (
                "decoded__response",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "toolu_01A09q90qw90lq917835lq9",
                      "toolId": "builtin:dice.roll",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "notation": "3d6+4"
                        }
                      }
                    },
                    {
                      "callId": "toolu_01Bx",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:create_issue",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "title": "Dice are loaded",
                          "labels": [
                            "bug"
                          ]
                        }
                      }
                    }
                  ],
                  "assistantText": "Rolling first, then filing the issue."
                }"#]],
            ),
            (
                "history__response",
                expect![[r#"
                [
                  {
                    "role": "assistant",
                    "content": [
                      {
                        "type": "thinking",
                        "thinking": "The user wants a roll and an issue.",
                        "signature": "EqQBCkgIARABGAIiQL1"
                      },
                      {
                        "type": "text",
                        "text": "Rolling first, then filing the issue."
                      },
                      {
                        "type": "tool_use",
                        "name": "dice_roll",
                        "input": {
                          "notation": "3d6+4"
                        },
                        "id": "toolu_01A09q90qw90lq917835lq9"
                      },
                      {
                        "type": "tool_use",
                        "name": "mcp__github__create_issue",
                        "input": {
                          "title": "Dice are loaded",
                          "labels": [
                            "bug"
                          ]
                        },
                        "id": "toolu_01Bx"
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "results__response",
                expect![[r###"
                [
                  {
                    "role": "user",
                    "content": [
                      {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                        "content": "3d6+4: 4 + 2 + 6 + 4 = 16",
                        "is_error": false
                      },
                      {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01Bx",
                        "content": "## Tool error\n\n`labels` must name existing labels; `bug` does not exist. Call without `labels` or use `triage`.",
                        "is_error": true
                      }
                    ]
                  }
                ]"###]],
            ),
            (
                "decoded__assistant",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "toolu_01Px",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:ping",
                      "arguments": {
                        "kind": "object",
                        "value": {}
                      }
                    }
                  ],
                  "assistantText": null
                }"#]],
            ),
            (
                "history__assistant",
                expect![[r#"
                [
                  {
                    "role": "assistant",
                    "content": [
                      {
                        "type": "tool_use",
                        "name": "mcp__github__ping",
                        "input": {},
                        "id": "toolu_01Px"
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "results__assistant",
                expect![[r#"
                [
                  {
                    "role": "user",
                    "content": [
                      {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01Px",
                        "is_error": false
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "trimmed__history",
                expect![[r#"
                [
                  {
                    "role": "user",
                    "content": "Roll the dice."
                  },
                  {
                    "role": "user",
                    "content": "[1 earlier turn(s) of this conversation were removed to fit the context window. Their tool results are still stored under `tool-results/`.]"
                  },
                  {
                    "role": "assistant",
                    "content": [
                      {
                        "type": "thinking",
                        "thinking": "The user wants a roll and an issue.",
                        "signature": "EqQBCkgIARABGAIiQL1"
                      },
                      {
                        "type": "text",
                        "text": "Rolling first, then filing the issue."
                      },
                      {
                        "type": "tool_use",
                        "name": "dice_roll",
                        "input": {
                          "notation": "3d6+4"
                        },
                        "id": "toolu_01A09q90qw90lq917835lq9"
                      },
                      {
                        "type": "tool_use",
                        "name": "mcp__github__create_issue",
                        "input": {
                          "title": "Dice are loaded",
                          "labels": [
                            "bug"
                          ]
                        },
                        "id": "toolu_01Bx"
                      }
                    ]
                  },
                  {
                    "role": "user",
                    "content": [
                      {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                        "content": "[This tool result (25 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/toolu_01A09q90qw90lq917835lq9.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]",
                        "is_error": false
                      },
                      {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01Bx",
                        "content": "[This tool result (111 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/toolu_01Bx.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]",
                        "is_error": true
                      }
                    ]
                  }
                ]"#]],
            ),
        ],
    );
}

#[test]
fn gemini() {
    check(
        ProviderFormat::Gemini,
        &[
            (
                "tools__all",
                expect![[r#"
                [
                  {
                    "functionDeclarations": [
                      {
                        "name": "dice_roll",
                        "description": "Roll dice in common notation: \"d6\", \"1d20\", \"3d6+4\", \"2d10-1\". Returns each die and the total.",
                        "parametersJsonSchema": {
                          "type": "object",
                          "properties": {
                            "notation": {
                              "type": "string",
                              "description": "Dice notation, e.g. \"3d6+4\"."
                            }
                          },
                          "required": [
                            "notation"
                          ],
                          "additionalProperties": false
                        }
                      },
                      {
                        "name": "mcp__github__create_issue",
                        "description": "Create an issue in a GitHub repository.",
                        "parametersJsonSchema": {
                          "$schema": "https://json-schema.org/draft/2020-12/schema",
                          "type": "object",
                          "properties": {
                            "title": {
                              "type": "string",
                              "minLength": 1
                            },
                            "labels": {
                              "type": "array",
                              "items": {
                                "type": "string"
                              },
                              "default": []
                            },
                            "priority": {
                              "anyOf": [
                                {
                                  "type": "integer",
                                  "minimum": 1
                                },
                                {
                                  "type": "null"
                                }
                              ]
                            }
                          },
                          "required": [
                            "title"
                          ],
                          "additionalProperties": false
                        }
                      },
                      {
                        "name": "mcp__github__ping",
                        "parametersJsonSchema": {
                          "type": "object"
                        }
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "tool_config__none",
                expect![[r#"
                {
                  "functionCallingConfig": {
                    "mode": "NONE"
                  }
                }"#]],
            ),
            (
                "tool_config__auto",
                expect![[r#"
                {
                  "functionCallingConfig": {
                    "mode": "AUTO"
                  }
                }"#]],
            ),
            (
                "tool_config__required",
                expect![[r#"
                {
                  "functionCallingConfig": {
                    "mode": "ANY"
                  }
                }"#]],
            ),
            (
                "tool_config__specific",
                expect![[r#"
                {
                  "functionCallingConfig": {
                    "mode": "ANY",
                    "allowedFunctionNames": [
                      "mcp__github__create_issue"
                    ]
                  }
                }"#]],
            ),
            (
                "decoded__response",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "2:0",
                      "toolId": "builtin:dice.roll",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "notation": "3d6+4"
                        }
                      },
                      "providerMetadata": {
                        "thoughtSignature": "CiQBVKhc7vB2fOOOTaQXN8Zq9p0=",
                        "callIdSynthesised": true
                      }
                    },
                    {
                      "callId": "2:1",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:create_issue",
                      "arguments": {
                        "kind": "object",
                        "value": {
                          "title": "Dice are loaded",
                          "labels": [
                            "bug"
                          ]
                        }
                      },
                      "providerMetadata": {
                        "callIdSynthesised": true
                      }
                    }
                  ],
                  "assistantText": "Rolling first, then filing the issue."
                }"#]],
            ),
            (
                "history__response",
                expect![[r#"
                [
                  {
                    "role": "model",
                    "parts": [
                      {
                        "text": "Roll first; the issue needs the result.",
                        "thought": true
                      },
                      {
                        "text": "Rolling first, then filing the issue."
                      },
                      {
                        "functionCall": {
                          "name": "dice_roll",
                          "args": {
                            "notation": "3d6+4"
                          }
                        },
                        "thoughtSignature": "CiQBVKhc7vB2fOOOTaQXN8Zq9p0="
                      },
                      {
                        "functionCall": {
                          "name": "mcp__github__create_issue",
                          "args": {
                            "title": "Dice are loaded",
                            "labels": [
                              "bug"
                            ]
                          }
                        }
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "results__response",
                expect![[r###"
                [
                  {
                    "role": "user",
                    "parts": [
                      {
                        "functionResponse": {
                          "name": "dice_roll",
                          "response": {
                            "output": "3d6+4: 4 + 2 + 6 + 4 = 16"
                          }
                        }
                      },
                      {
                        "functionResponse": {
                          "name": "mcp__github__create_issue",
                          "response": {
                            "error": "## Tool error\n\n`labels` must name existing labels; `bug` does not exist. Call without `labels` or use `triage`."
                          }
                        }
                      }
                    ]
                  }
                ]"###]],
            ),
            (
                "decoded__assistant",
                expect![[r#"
                {
                  "invocations": [
                    {
                      "callId": "fc-1",
                      "toolId": "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:ping",
                      "arguments": {
                        "kind": "object",
                        "value": {}
                      }
                    }
                  ],
                  "assistantText": null
                }"#]],
            ),
            (
                "history__assistant",
                expect![[r#"
                [
                  {
                    "role": "model",
                    "parts": [
                      {
                        "functionCall": {
                          "name": "mcp__github__ping",
                          "args": {},
                          "id": "fc-1"
                        }
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "results__assistant",
                expect![[r#"
                [
                  {
                    "role": "user",
                    "parts": [
                      {
                        "functionResponse": {
                          "id": "fc-1",
                          "name": "mcp__github__ping",
                          "response": {
                            "output": ""
                          }
                        }
                      }
                    ]
                  }
                ]"#]],
            ),
            (
                "trimmed__history",
                expect![[r#"
                [
                  {
                    "role": "user",
                    "parts": [
                      {
                        "text": "Roll the dice."
                      }
                    ]
                  },
                  {
                    "role": "user",
                    "parts": [
                      {
                        "text": "[1 earlier turn(s) of this conversation were removed to fit the context window. Their tool results are still stored under `tool-results/`.]"
                      }
                    ]
                  },
                  {
                    "role": "model",
                    "parts": [
                      {
                        "text": "Roll first; the issue needs the result.",
                        "thought": true
                      },
                      {
                        "text": "Rolling first, then filing the issue."
                      },
                      {
                        "functionCall": {
                          "name": "dice_roll",
                          "args": {
                            "notation": "3d6+4"
                          }
                        },
                        "thoughtSignature": "CiQBVKhc7vB2fOOOTaQXN8Zq9p0="
                      },
                      {
                        "functionCall": {
                          "name": "mcp__github__create_issue",
                          "args": {
                            "title": "Dice are loaded",
                            "labels": [
                              "bug"
                            ]
                          }
                        }
                      }
                    ]
                  },
                  {
                    "role": "user",
                    "parts": [
                      {
                        "functionResponse": {
                          "name": "dice_roll",
                          "response": {
                            "output": "[This tool result (25 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/2:0.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]"
                          }
                        }
                      },
                      {
                        "functionResponse": {
                          "name": "mcp__github__create_issue",
                          "response": {
                            "error": "[This tool result (111 characters) was removed from the conversation to fit the context window. It is stored in full in `tool-results/inv-1/2:1.json` (its `result.content`). Read it with `workspace_read_file` if you need it again.]"
                          }
                        }
                      }
                    ]
                  }
                ]"#]],
            ),
        ],
    );
}
