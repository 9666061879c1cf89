#!/usr/bin/env python3
"""Checks scripts/pretokenize.py exactly: byte-level ids and masks, the three record formats, a
BPE tokenizer with a chat template and one without. Run by tests/test_data_pretokenize.cpp."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "pretokenize.py")


def run(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


def b(text):
    return [c + 3 for c in text.encode("utf-8")]


def main():
    tmp = tempfile.mkdtemp()
    alpaca = [{"instruction": "Hi", "input": "", "output": "Yo"},
              {"instruction": "Say", "input": "é", "output": "ok"},
              {"instruction": "Nothing", "input": "", "output": ""}]
    share = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]}
    openai = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Yo"}]}
    with open(os.path.join(tmp, "alpaca.json"), "w") as f:
        json.dump(alpaca, f)
    with open(os.path.join(tmp, "chat.jsonl"), "w") as f:
        f.write(json.dumps(share) + "\n" + json.dumps(openai) + "\n")

    # Byte level: exact ids and masks.
    out = os.path.join(tmp, "bytes.jsonl")
    log = run(os.path.join(tmp, "alpaca.json"), os.path.join(tmp, "chat.jsonl"), "-o", out, "--byte-level")
    check("4 samples" in log and "1 skipped" in log, "byte-level counts: " + log)
    s = read_jsonl(out)
    prompt = [1] + b("User: Hi\n\n") + b("Assistant: ")
    check(s[0]["input_ids"] == prompt + b("Yo") + [2], "byte-level ids")
    check(s[0]["loss_mask"] == [0] * len(prompt) + [1, 1, 1], "byte-level mask")
    check(s[1]["input_ids"] == [1] + b("User: Say\n\né\n\n") + b("Assistant: ") + b("ok") + [2], "alpaca input joined")
    check(s[2] == s[0], "ShareGPT equals Alpaca")
    check(s[3]["input_ids"] == [1] + b("System: S\n\n") + prompt[1:] + b("Yo") + [2], "OpenAI with a system turn")

    # A BPE tokenizer trained here, saved as a folder with a chat template.
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["Hi Yo Say ok hello world " * 20], trainer)
    folder = os.path.join(tmp, "tok")
    os.makedirs(folder)
    tok.save(os.path.join(folder, "tokenizer.json"))
    # The space after the role marker ends the generation prompt, and byte-level BPE glues it to the
    # reply's first token (" Yo"): that token must still be trained.
    template = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|> {{ m.content }}<|end|>{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|> {% endif %}")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "chat_template": template}, f)
    out3 = os.path.join(tmp, "bpe.jsonl")
    log = run(os.path.join(tmp, "chat.jsonl"), "-o", out3, "--tokenizer", folder)
    check("chat template" in log, "chat template used: " + log)
    for rec in read_jsonl(out3):
        ids, mask = rec["input_ids"], rec["loss_mask"]
        check(len(ids) == len(mask), "lengths")
        trained = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
        check(trained == " Yo<|end|>", "chat-template trained text: " + repr(trained))
        check(ids[0] == tok.token_to_id("<s>") and mask[0] == 0, "bos first, untrained")
        check(tok.token_to_id("<|assistant|>") in ids, "assistant marker")
    # The same folder with the simple template, and a bare tokenizer.json.
    out4 = os.path.join(tmp, "simple.jsonl")
    run(os.path.join(tmp, "alpaca.json"), "-o", out4, "--tokenizer", os.path.join(folder, "tokenizer.json"))
    rec = read_jsonl(out4)[0]
    trained = [i for i, m in zip(rec["input_ids"], rec["loss_mask"]) if m]
    check(trained == tok.encode("Yo", add_special_tokens=False).ids + [tok.token_to_id("</s>")], "simple template mask")

    # A SPEED-Bench-style file (one prompt per record, its category): --prompts writes eval prompts,
    # the category kept; the prompt ends with the generation prompt, then one trained eos.
    speed = [{"question_id": "q1", "category": "coding", "turns": ["Hi", "And then?"]},
             {"question_id": "q2", "category": "math", "turns": ["Say"]},
             {"question_id": "q3", "turns": ["Yo"]}]
    with open(os.path.join(tmp, "speed.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in speed))
    out5 = os.path.join(tmp, "prompts.jsonl")
    log = run(os.path.join(tmp, "speed.jsonl"), "-o", out5, "--byte-level", "--prompts")
    check("3 samples" in log, "prompt counts: " + log)
    s = read_jsonl(out5)
    check(s[0]["input_ids"] == prompt + [2], "a prompt: the first turn, the generation prompt, eos")
    check(s[0]["loss_mask"] == [0] * len(prompt) + [1], "only the eos after the prompt is trained")
    check([r.get("category") for r in s] == ["coding", "math", None], "categories kept: " + repr(s))
    # Training samples keep their category too.
    with open(os.path.join(tmp, "cat.jsonl"), "w") as f:
        f.write(json.dumps(dict(share, category="chat")) + "\n")
    out6 = os.path.join(tmp, "cat_out.jsonl")
    run(os.path.join(tmp, "cat.jsonl"), "-o", out6, "--byte-level")
    check(read_jsonl(out6)[0] == dict(read_jsonl(out)[0], category="chat"), "a training sample's category")
    # With a chat template: the rendered generation prompt, then eos.
    out7 = os.path.join(tmp, "prompts_bpe.jsonl")
    run(os.path.join(tmp, "speed.jsonl"), "-o", out7, "--tokenizer", folder, "--prompts")
    rec = read_jsonl(out7)[1]
    check(rec["category"] == "math" and rec["loss_mask"][-1] == 1 and sum(rec["loss_mask"]) == 1, "bpe prompt mask")
    check(rec["input_ids"][-1] == tok.token_to_id("</s>"), "bpe prompt ends with eos")
    check(tok.decode(rec["input_ids"][:-1], skip_special_tokens=False).endswith("<|assistant|> "),
          "bpe prompt ends with the generation prompt: " + tok.decode(rec["input_ids"], skip_special_tokens=False))
    print("pretokenize tests passed")


if __name__ == "__main__":
    main()
