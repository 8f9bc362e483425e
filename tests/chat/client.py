"""The official OpenAI Python client against switchboard's chat API (tests/chat_api.rs).

Usage: client.py BASE_URL TOKEN OTHER_TOKEN
Prints one JSON line: the models the token sees, the streamed text, and what a token
without agent:support got.
"""
import json
import sys

import openai

base_url, token, other = sys.argv[1:4]
headers = {"x-switchboard-session-id": "#ops"}
client = openai.OpenAI(base_url=base_url, api_key=token, default_headers=headers, max_retries=0, timeout=60)
models = [m.id for m in client.models.list()]
stream = client.chat.completions.create(
    model="switchboard:support",
    messages=[{"role": "user", "content": "stream it"}],
    stream=True,
)
pieces = []
finish = None
for chunk in stream:
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
refused = None
try:
    openai.OpenAI(base_url=base_url, api_key=other, default_headers=headers, max_retries=0, timeout=60).chat.completions.create(
        model="switchboard:support",
        messages=[{"role": "user", "content": "hi"}],
    )
except openai.PermissionDeniedError as error:
    refused = error.status_code
print(json.dumps({"models": models, "text": "".join(pieces), "finish": finish, "refused": refused}))
