"""Real LoRA adapters for tests: one gradient step of PEFT on the base model toward a text."""

import torch


def train_lora(model_path, folder, messages, target: str, lr: float = 2e-2, seed: int = 0) -> str:
    """Save an adapter to `folder` after one AdamW step toward answering `messages` with
    `target`; return PEFT's own greedy answer (12 tokens) with that adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model = get_peft_model(
        model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    )
    chat = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    batch = tokenizer(chat + target, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model(**batch, labels=batch["input_ids"]).loss.backward()
    optimizer.step()
    model.eval()
    model.save_pretrained(folder)
    prompt_ids = tokenizer(chat, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt_ids, max_new_tokens=12, do_sample=False)
    return tokenizer.decode(out[0, prompt_ids["input_ids"].shape[1] :], skip_special_tokens=True)
