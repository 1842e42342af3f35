// The official OpenAI Node client (npm `openai`, third_party/npm) against `kvec serve`: chat and
// completions, whole and streamed, the `kv` extension passed as an extra body field, the API key.
// Prints one JSON object with the texts, which openai_client_test.sh compares with `kvec run`.
//
//   NODE_PATH=third_party/npm/node_modules node openai_client.cjs PORT API_KEY PROMPT_FILE
'use strict';
const fs = require('fs');
const assert = require('assert');
const OpenAI = require('openai');

async function main() {
    const [port, apiKey, promptFile] = process.argv.slice(2);
    const prompt = fs.readFileSync(promptFile, 'utf8');
    const client = new OpenAI({baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0, timeout: 60000});

    const models = await client.models.list();
    assert.strictEqual(models.data.length, 1);
    const model = models.data[0].id;

    const messages = [{role: 'system', content: 'Be brief.'}, {role: 'user', content: prompt}];
    const chat = await client.chat.completions.create({model, messages, max_tokens: 12, temperature: 0});
    assert.strictEqual(chat.object, 'chat.completion');
    assert.ok(chat.id.startsWith('chatcmpl-'));
    assert.strictEqual(chat.choices[0].message.role, 'assistant');
    assert.strictEqual(typeof chat.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(chat.choices[0].finish_reason));
    assert.strictEqual(chat.usage.total_tokens, chat.usage.prompt_tokens + chat.usage.completion_tokens);

    let streamed = '';
    let finish = null;
    const stream = await client.chat.completions.create({model, messages, max_tokens: 12, temperature: 0, stream: true});
    for await (const chunk of stream) {
        assert.strictEqual(chunk.object, 'chat.completion.chunk');
        const choice = chunk.choices[0];
        if (choice && choice.delta.content) streamed += choice.delta.content;
        if (choice && choice.finish_reason) finish = choice.finish_reason;
    }
    assert.strictEqual(streamed, chat.choices[0].message.content);
    assert.strictEqual(finish, chat.choices[0].finish_reason);

    // The kv extension: an extra body field, which the client sends as given.
    const kv = {policy: 'snapkv', budget: 36};
    const completion = await client.completions.create({model, prompt, max_tokens: 12, temperature: 0, kv});
    assert.strictEqual(completion.object, 'text_completion');
    assert.strictEqual(completion.kv.budget, 36);
    assert.strictEqual(completion.kv.budget_held, true);
    assert.ok(completion.kv.evicted > 0);

    let streamedCompletion = '';
    let usage = null;
    const cstream = await client.completions.create({model, prompt, max_tokens: 12, temperature: 0, kv, stream: true,
                                                     stream_options: {include_usage: true}});
    for await (const chunk of cstream) {
        if (chunk.choices.length > 0) streamedCompletion += chunk.choices[0].text;
        if (chunk.usage) usage = chunk.usage;
    }
    assert.strictEqual(streamedCompletion, completion.choices[0].text);
    assert.deepStrictEqual({p: usage.prompt_tokens, c: usage.completion_tokens},
                           {p: completion.usage.prompt_tokens, c: completion.usage.completion_tokens});

    // Errors arrive as the client's typed errors.
    await assert.rejects(client.completions.create({model, prompt, max_tokens: -4}),
                         (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message));
    const anonymous = new OpenAI({baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0});
    await assert.rejects(anonymous.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);

    console.log(JSON.stringify({chat: chat.choices[0].message.content, completion: completion.choices[0].text}));
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
