"""replace_attention on Hugging Face transformers models (tokenmix.models.hf): tiny models built from a config, no
download. With softmax each family computes what it did (outputs and gradients, padded, causal, train and eval);
every Q/K/V mechanism trains in each; causal ones leak nothing and decode with a cache as without; the rest is
refused by name."""

from __future__ import annotations

import copy
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tokenmix  # noqa: E402
from tokenmix.models.hf import HFMechanism  # noqa: E402

QKV = ["softmax", "linear", "performer", "cosformer", "kerformer", "efficient", "sparse_strided", "sparse_fixed"]
CAUSAL_QKV = [name for name in QKV if name != "efficient"]
# MixerInfo.hidden: the gates read the hidden states
GATED = ["deltanet", "gated_deltanet", "gla", "retention", "mamba2"]
GATED_OPTIONS = {"retention": {"xpos": False}}  # Llama rotates Q and K itself; GPT-2 does not (xpos stays on there)
VOCAB, N = 40, 10


def _bert(**extra):
    settings = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                    attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0, max_position_embeddings=64)
    config = transformers.BertConfig(**{**settings, **extra})
    return transformers.BertForSequenceClassification(config)


def _roberta():
    config = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=37, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0,
                                        max_position_embeddings=64, pad_token_id=1)
    return transformers.RobertaForSequenceClassification(config)


def _gpt2(**extra):
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_pdrop=0.0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0, **extra)
    return transformers.GPT2LMHeadModel(config)


def _llama():
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=40, max_position_embeddings=64,
                                      bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return transformers.LlamaForCausalLM(config)


def _vit():
    config = transformers.ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=37, num_labels=3,
                                    attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
    return transformers.ViTForImageClassification(config)


FAMILIES = {"bert": _bert, "roberta": _roberta, "gpt2": _gpt2, "llama": _llama, "vit": _vit}
CAUSAL = {"gpt2", "llama"}


def _model(family: str, seed: int = 0):
    torch.manual_seed(seed)
    model = FAMILIES[family]()
    model.set_attn_implementation("eager")
    return model


def _batch(family: str, seed: int = 1) -> tuple[dict, torch.Tensor | None]:
    """Inputs and the real-token mask: right padding for the encoders and GPT-2, left padding for Llama."""
    g = torch.Generator().manual_seed(seed)
    if family == "vit":
        return {"pixel_values": torch.randn(3, 1, 8, 8, generator=g)}, None
    ids = torch.randint(2, VOCAB, (3, N), generator=g)
    real = torch.ones(3, N, dtype=torch.bool)
    real[1, 7:] = False
    real[2, 4:] = False
    if family == "llama":
        real = real.flip(1)
    return {"input_ids": ids, "attention_mask": real.long()}, real


def _output(model, inputs):
    out = model(**inputs)
    return out.logits


def _loss(model, inputs, real):
    logits = _output(model, inputs)
    if logits.dim() == 3:  # per token: only the real positions count
        return (logits.square().sum(-1) * real).sum()
    return logits.square().sum()


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_softmax_computes_what_the_model_computed(family, train):
    original = _model(family)
    swapped = copy.deepcopy(original)
    assert tokenmix.replace_attention(swapped, "softmax") == 2
    assert swapped.config._attn_implementation == "tokenmix"
    inputs, real = _batch(family)
    for model in (original, swapped):
        model.train(train)
    a, b = _output(original, inputs), _output(swapped, inputs)
    if a.dim() == 3:
        a, b = a[real], b[real]
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    _loss(original, inputs, real).backward()
    _loss(swapped, inputs, real).backward()
    grads = dict(swapped.named_parameters())
    for name, p in original.named_parameters():
        if p.grad is not None:
            assert torch.allclose(p.grad, grads[name].grad, atol=1e-4), name


@pytest.mark.parametrize("name", QKV)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_qkv_mechanism_trains_in_each_family(family, name):
    model = _model(family)
    if family in CAUSAL and name not in CAUSAL_QKV:
        with pytest.raises(ValueError, match="self_attn|attn.*efficient|efficient.*causal"):
            tokenmix.replace_attention(model, name)
        return
    tokenmix.replace_attention(model, name)
    inputs, real = _batch(family)
    if family in CAUSAL:
        inputs["labels"] = inputs["input_ids"].masked_fill(~real, -100)
    else:
        inputs["labels"] = torch.tensor([0, 1, 2]) if family == "vit" else torch.tensor([0, 1, 1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = model(**inputs).loss
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("name", CAUSAL_QKV)
@pytest.mark.parametrize("family", sorted(CAUSAL))
def test_no_causal_leak(family, name):
    model = _model(family)
    tokenmix.replace_attention(model, name)
    ids = torch.randint(2, VOCAB, (2, N))
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    t = 4
    model(inputs_embeds=embeds).logits[:, t].sum().backward()
    assert embeds.grad[:, t + 1:].abs().max() == 0  # exactly zero from every later input
    assert embeds.grad[:, :t + 1].abs().max() > 0


@pytest.mark.parametrize("name", QKV)
def test_padding_content_does_not_change_real_positions(name):
    model = _model("bert").eval()
    tokenmix.replace_attention(model, name)
    inputs, real = _batch("bert")
    before = model.bert(**inputs).last_hidden_state
    inputs["input_ids"] = inputs["input_ids"].masked_fill(~real, 3)
    after = model.bert(**inputs).last_hidden_state
    assert torch.allclose(before[real], after[real], atol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "linear", "kerformer", "performer"])
def test_decoding_with_a_cache_equals_recomputation(name):
    model = _model("llama").eval()
    tokenmix.replace_attention(model, name)
    ids = torch.randint(2, VOCAB, (2, N))
    full = model(ids).logits
    out = model(ids[:, :6], use_cache=True)
    cache, steps = out.past_key_values, [out.logits]
    for i in range(6, N):
        out = model(ids[:, i:i + 1], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    prompt = ids[:1, :4]
    with_cache = model.generate(prompt, max_new_tokens=5, do_sample=False)
    without = model.generate(prompt, max_new_tokens=5, do_sample=False, use_cache=False)
    assert torch.equal(with_cache, without)


def test_cross_attention_is_left_as_it_was():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=37, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0,
                                     is_decoder=True, add_cross_attention=True)
    original = transformers.BertModel(config)
    original.set_attn_implementation("eager")
    swapped = copy.deepcopy(original)
    assert tokenmix.replace_attention(swapped, "softmax") == 1  # the self-attention only
    ids, memory = torch.randint(2, VOCAB, (2, N)), torch.randn(2, 5, 32)
    memory_mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]])
    a = original(ids, encoder_hidden_states=memory, encoder_attention_mask=memory_mask).last_hidden_state
    b = swapped(ids, encoder_hidden_states=memory, encoder_attention_mask=memory_mask).last_hidden_state
    assert torch.allclose(a, b, atol=1e-5)


def test_the_mechanisms_parameters_belong_to_the_model():
    model = _model("bert")
    tokenmix.replace_attention(model, "kerformer")
    names = [n for n, _ in model.named_parameters() if ".tokenmix." in n]
    assert names and all("q_proj" not in n for n in names)  # SE-K's own weights, the model's projections kept
    mechanisms = [m for m in model.modules() if isinstance(m, HFMechanism)]
    assert mechanisms and not any(m.mixer.has_projections for m in mechanisms)  # built without, not stripped
    fresh = _model("bert")
    tokenmix.replace_attention(fresh, "kerformer")
    fresh.load_state_dict(model.state_dict())
    inputs, _ = _batch("bert")
    assert torch.equal(model.eval()(**inputs).logits, fresh.eval()(**inputs).logits)


def test_filter_leaves_modules_as_they_were():
    original = _model("gpt2")
    swapped = copy.deepcopy(original)
    assert tokenmix.replace_attention(swapped, "linear", filter=lambda path: path.startswith("transformer.h.0")) == 1
    assert not hasattr(swapped.transformer.h[1].attn, "tokenmix")
    with pytest.raises(ValueError, match="not accepted by filter"):
        tokenmix.replace_attention(copy.deepcopy(original), "linear", filter=lambda path: False)


def test_refusals_name_the_mechanism_and_the_reason():
    with pytest.raises(ValueError, match="'relation' is not a Q/K/V mechanism"):
        tokenmix.replace_attention(_model("bert"), "relation")
    with pytest.raises(ValueError, match="vision mixer"):
        tokenmix.replace_attention(_model("vit"), "swin")
    with pytest.raises(ValueError, match="causal= and copy_weights= do not apply"):
        tokenmix.replace_attention(_model("gpt2"), "linear", causal=True)
    with pytest.raises(ValueError, match="causal= and copy_weights= do not apply"):
        tokenmix.replace_attention(_model("bert"), "softmax", copy_weights=True)
    torch.manual_seed(0)
    dropping = _bert(attention_probs_dropout_prob=0.1)
    with pytest.raises(ValueError, match="attention dropout 0.1.*ignore_dropout"):
        tokenmix.replace_attention(dropping, "linear")
    assert tokenmix.replace_attention(dropping, "linear", ignore_dropout=True) == 2
    dropping.train()(**_batch("bert")[0])  # trains without it


def test_a_models_own_score_scale_is_kept():
    """GPT-2's scale_attn_by_inverse_layer_idx divides layer i's scores by i + 1: folded into the queries, softmax
    computes what the model did; T5's scale of 1 likewise."""
    torch.manual_seed(0)
    original = _gpt2(scale_attn_by_inverse_layer_idx=True).eval()
    original.set_attn_implementation("eager")
    swapped = copy.deepcopy(original)
    tokenmix.replace_attention(swapped, "softmax")
    ids = torch.randint(2, VOCAB, (2, N))
    assert torch.allclose(swapped(ids).logits, original(ids).logits, atol=1e-5)


def _seq2seq(kind: str):
    settings = dict(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, dropout=0.0,
                    attention_dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
    if kind == "whisper":
        config = transformers.WhisperConfig(num_mel_bins=4, max_source_positions=8, max_target_positions=32,
                                            **settings)
        return transformers.WhisperForConditionalGeneration(config)
    config = getattr(transformers, f"{kind}Config")(max_position_embeddings=64, **settings)
    return getattr(transformers, {"Bart": "BartForConditionalGeneration", "MBart": "MBartForConditionalGeneration",
                                  "Marian": "MarianMTModel"}[kind])(config)


def _seq2seq_inputs(kind: str) -> dict:
    g = torch.Generator().manual_seed(3)
    decoder = torch.randint(3, VOCAB, (2, 5), generator=g)
    if kind == "whisper":  # 2 x 8 frames after the convolutions' stride
        return {"input_features": torch.randn(2, 4, 16, generator=g), "decoder_input_ids": decoder}
    ids = torch.randint(3, VOCAB, (2, 7), generator=g)  # a length unlike the decoder's
    return {"input_ids": ids, "attention_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2]),
            "decoder_input_ids": decoder}


@pytest.mark.parametrize("kind", ["Bart", "MBart", "Marian", "whisper"])
def test_encoder_decoders_keep_their_cross_attention(kind):
    torch.manual_seed(0)
    original = _seq2seq(kind).eval()
    original.set_attn_implementation("eager")
    swapped = copy.deepcopy(original)
    assert tokenmix.replace_attention(swapped, "softmax") == 2  # encoder and decoder self-attention
    crossing = [path for path, m in swapped.named_modules() if path.endswith("encoder_attn")]
    assert crossing and all(not hasattr(swapped.get_submodule(p), "tokenmix") for p in crossing)
    inputs = _seq2seq_inputs(kind)
    assert torch.allclose(swapped(**inputs).logits, original(**inputs).logits, atol=1e-5)
    linear = copy.deepcopy(original)
    assert tokenmix.replace_attention(linear, "linear") == 2
    linear(**inputs).logits.sum().backward()
    with pytest.raises(ValueError, match=r"decoder.layers.0.encoder_attn is cross-attention"):
        tokenmix.replace_attention(copy.deepcopy(original), "linear", filter=lambda path: "encoder_attn" in path)


def test_t5_is_refused_when_replace_attention_runs():
    config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=1, num_decoder_layers=1,
                                   num_heads=4, dropout_rate=0.0)
    model = transformers.T5ForConditionalGeneration(config)
    with pytest.raises(ValueError, match=r"encoder.block.0.layer.0.SelfAttention .* relative position bias .*"
                                         r"relative_attention_num_buckets=32"):
        tokenmix.replace_attention(model, "linear")
    with pytest.raises(ValueError, match=r"decoder.block.0.layer.1.EncDecAttention is cross-attention"):
        tokenmix.replace_attention(model, "linear", filter=lambda path: "EncDec" in path)
    assert not any(hasattr(m, "tokenmix") for m in model.modules())  # refused before anything changed


def _mistral(**extra):
    config = transformers.MistralConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=40, **extra)
    return transformers.MistralForCausalLM(config)


def test_settings_a_mechanism_cannot_take_are_refused_when_replace_attention_runs():
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn \(MistralAttention\) has a sliding window .*"
                                         r"sliding_window=4096.*sliding_window=None"):
        tokenmix.replace_attention(_mistral(), "linear")  # Mistral's default config, even for short inputs
    full = _mistral(sliding_window=None)
    assert tokenmix.replace_attention(full, "linear") == 2
    full(torch.randint(2, VOCAB, (1, N)))
    gemma = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, intermediate_size=40, sliding_window=None))
    with pytest.raises(ValueError, match=r"soft-capped at 50.0 \(attn_logit_softcapping=50.0; set it to None\)"):
        tokenmix.replace_attention(gemma, "linear")
    with pytest.raises(ValueError, match=r"model.rotary_emb.*rotate them a second time"):
        tokenmix.replace_attention(_model("llama"), "linear", rotary=True)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"output_attentions=True in its config"):
        tokenmix.replace_attention(_gpt2(output_attentions=True), "linear")


def test_gpt_oss_attention_sinks_are_refused():
    config = transformers.GptOssConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=8, intermediate_size=32, num_local_experts=2,
                                       num_experts_per_tok=1, layer_types=["full_attention"])
    with pytest.raises(ValueError, match="attention sinks"):
        tokenmix.replace_attention(transformers.GptOssForCausalLM(config), "linear")


def test_output_attentions_returns_weights_or_refuses_by_module():
    original = _model("llama").eval()
    swapped = copy.deepcopy(original)
    tokenmix.replace_attention(swapped, "softmax")
    ids = torch.randint(2, VOCAB, (2, N))
    mine, theirs = swapped(ids, output_attentions=True).attentions, original(ids, output_attentions=True).attentions
    assert len(mine) == len(theirs) == 2 and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(mine, theirs))
    linear = copy.deepcopy(original)
    tokenmix.replace_attention(linear, "linear")
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn .*output_attentions=True.*no attention-weight"):
        linear(ids, output_attentions=True)


def test_a_custom_4d_mask_is_refused_naming_the_module():
    model = _model("llama")
    tokenmix.replace_attention(model, "linear")
    mask = torch.ones(2, 1, N, N, dtype=torch.bool).tril()
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn .*custom 4-D attention mask.*2-D padding mask"):
        model(torch.randint(2, VOCAB, (2, N)), attention_mask=mask)


def _inputs_of(family: str) -> dict:
    return _seq2seq_inputs("Bart") if family == "bart" else _batch(family)[0]


ROUND_TRIP = {**FAMILIES, "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    intermediate_size=40)), "bart": lambda: _seq2seq("Bart")}


@pytest.mark.parametrize("family", sorted(ROUND_TRIP))
def test_a_converted_model_round_trips_through_save_and_from_pretrained(family, tmp_path):
    """save_pretrained, then the Auto class with trust_remote_code (and tokenmix.load_converted): the same class,
    mechanisms and weights, equal logits; the mechanism's own parameters moved off their initialisation first."""
    torch.manual_seed(0)
    model = ROUND_TRIP[family]().eval()
    tokenmix.replace_attention(model, "kerformer", ignore_dropout=True)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    saved = __import__("json").loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "tokenmix" and saved["attn_implementation"] == "tokenmix"
    [auto_name] = [name for name in saved["auto_map"] if name in (
        "AutoModelForCausalLM", "AutoModelForSequenceClassification", "AutoModelForImageClassification",
        "AutoModelForSeq2SeqLM")]
    inputs = _inputs_of(family)
    for loaded in (getattr(transformers, auto_name).from_pretrained(tmp_path, trust_remote_code=True),
                   tokenmix.load_converted(str(tmp_path))):
        assert type(loaded).__name__ == type(model).__name__
        assert sorted(loaded.state_dict()) == sorted(model.state_dict())
        assert torch.equal(loaded.eval()(**inputs).logits, model(**inputs).logits)


def test_a_converted_model_is_never_loaded_back_as_softmax(tmp_path):
    """Without trust_remote_code the Auto class refuses; a class's own from_pretrained fails on the attention
    implementation, or, with it registered, at the first call naming the loaders."""
    import subprocess
    import sys

    model = _model("llama")
    tokenmix.replace_attention(model, "linear", feature_map="hedgehog", feature_dim=4)
    tokenmix.save_converted(model, str(tmp_path), recipe="none")
    assert __import__("json").loads((tmp_path / "config.json").read_text())["tokenmix"]["notes"] == {"recipe": "none"}
    for code in ("import transformers; transformers.AutoModelForCausalLM.from_pretrained(FOLDER)",
                 "import transformers; transformers.LlamaForCausalLM.from_pretrained(FOLDER)"):
        run = subprocess.run([sys.executable, "-c", code.replace("FOLDER", repr(str(tmp_path)))],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
        assert run.returncode != 0 and ("trust_remote_code" in run.stderr or '"tokenmix"' in run.stderr)
    plain = transformers.LlamaForCausalLM.from_pretrained(tmp_path)  # here "tokenmix" is registered
    with pytest.raises(ValueError, match=r"replaced by tokenmix \('linear'\).*load_converted"):
        plain(torch.randint(2, VOCAB, (1, N)))
    with pytest.raises(ValueError, match="not a Hugging Face model with attention replaced"):
        tokenmix.save_converted(_model("bert"), str(tmp_path / "plain"))
    _model("bert").save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="not a model converted by tokenmix"):
        tokenmix.load_converted(str(tmp_path / "bert"))


def test_two_replacements_in_one_model_round_trip(tmp_path):
    """Each call recorded with its own modules and options: two mechanisms, the same mechanism with two options, and
    a later call taking one module of an earlier one."""
    model = _model("gpt2").eval()
    tokenmix.replace_attention(model, "linear", filter=lambda path: path.startswith("transformer.h.0"))
    tokenmix.replace_attention(model, "performer", filter=lambda path: path.startswith("transformer.h.1"))
    model.save_pretrained(tmp_path)
    loaded = tokenmix.load_converted(str(tmp_path)).eval()
    names = [m.tokenmix.mixer_name for m in (loaded.transformer.h[0].attn, loaded.transformer.h[1].attn)]
    assert names == ["linear", "performer"]
    ids = torch.randint(2, VOCAB, (2, N))
    assert torch.equal(loaded(ids).logits, model(ids).logits)
    twice = _model("gpt2").eval()
    tokenmix.replace_attention(twice, "linear", feature_map="t2r")
    tokenmix.replace_attention(twice, "linear", feature_map="hedgehog", filter=lambda path: ".h.1." in f"{path}.")
    twice.save_pretrained(tmp_path / "twice")
    again = tokenmix.load_converted(str(tmp_path / "twice")).eval()
    maps = [m.tokenmix.mixer.feature_map for m in (again.transformer.h[0].attn, again.transformer.h[1].attn)]
    assert maps == ["t2r", "hedgehog"] and torch.equal(again(ids).logits, twice(ids).logits)


@pytest.mark.parametrize("name", CAUSAL_QKV)
@pytest.mark.parametrize("family", sorted(CAUSAL))
def test_decoding_from_the_recurrent_state_equals_recomputation(family, name):
    model = _model(family).eval()
    tokenmix.replace_attention(model, name)
    prompt = torch.randint(2, VOCAB, (2, 5))
    without = model.generate(prompt, max_new_tokens=6, do_sample=False, use_cache=False)
    with torch.no_grad(), tokenmix.decoding(model) as cache:
        with_state = model.generate(prompt, max_new_tokens=6, do_sample=False, past_key_values=cache)
        assert cache.get_seq_length() == with_state.shape[1] - 1  # every token but the last went through
        assert all(layer.keys is None for layer in cache.layers)  # no keys or values kept
    assert torch.equal(with_state, without)


def test_a_kernel_mechanisms_decoding_state_stays_the_same_size():
    model = _model("llama").eval()
    tokenmix.replace_attention(model, "linear")
    mechanism = model.model.layers[0].self_attn.tokenmix
    sizes = []
    with torch.no_grad(), tokenmix.decoding(model) as cache:
        out = model(torch.randint(2, VOCAB, (1, 4)), past_key_values=cache)
        for _ in range(5):
            token = out.logits[:, -1:].argmax(-1)
            out = model(token, past_key_values=cache)
            sizes.append(sum(v.numel() for v in mechanism.decoding_state.values()))
    assert len(set(sizes)) == 1 and mechanism.decoding_state is None  # dropped on leaving the context
    with pytest.raises(ValueError, match="is not causal"):
        bert = _model("bert")
        tokenmix.replace_attention(bert, "linear")
        with tokenmix.decoding(bert):
            pass


def test_a_causal_only_mechanism_without_q_k_v_is_refused_as_such():
    """The refusal names what is missing (the model's own Q/K/V), not a causal= the Hugging Face path never takes."""
    model = _model("gpt2")
    with pytest.raises(ValueError, match="'baseconv' is not a Q/K/V mechanism"):
        tokenmix.replace_attention(model, "baseconv")


def _left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(2, VOCAB, (3, 6), generator=g)
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, :4] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("name", CAUSAL_QKV + GATED)
def test_plain_generate_decodes_from_the_recurrent_state(name):
    """No context to open: generate on a replaced causal model runs from the mechanisms' states (no keys or values
    kept), left-padded batches and beam search included, and gives what recomputing every prefix gives."""
    model = _model("llama").eval()
    tokenmix.replace_attention(model, name, **GATED_OPTIONS.get(name, {}))
    ids, mask = _left_padded()
    for settings in ({}, {"attention_mask": mask}, {"attention_mask": mask, "num_beams": 3}):
        recomputed = model.generate(ids, max_new_tokens=5, do_sample=False, use_cache=False, **settings)
        out = model.generate(ids, max_new_tokens=5, do_sample=False, return_dict_in_generate=True, **settings)
        assert torch.equal(out.sequences, recomputed), settings
        growing = tokenmix.models.hf_cache.state_grows(model.model.layers[0].self_attn.tokenmix.mixer)
        if not (growing and settings):  # a key/value cache cannot skip padding: the model's own cache then
            assert all(layer.keys is None for layer in out.past_key_values.layers)
    assert model.model.layers[0].self_attn.tokenmix.decoding_state is None  # dropped after generate


def test_padding_inside_decoding_is_refused_only_for_a_growing_cache():
    ids, mask = _left_padded()
    model = _model("llama").eval()
    tokenmix.replace_attention(model, "softmax")
    with torch.no_grad(), tokenmix.decoding(model) as cache:
        with pytest.raises(ValueError, match=r"model.layers.0.self_attn .*growing key/value cache"):
            model(ids, attention_mask=mask, past_key_values=cache)


def test_generate_keeps_a_constant_state_over_2000_tokens():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=16, max_position_embeddings=4096,
                                      bos_token_id=0, eos_token_id=None, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).eval()
    tokenmix.replace_attention(model, "linear")
    mechanism = model.model.layers[0].self_attn.tokenmix
    sizes = []
    mechanism.register_forward_hook(lambda module, args, out: sizes.append(
        sum(v.numel() for v in module.decoding_state.values())))
    out = model.generate(torch.randint(2, VOCAB, (1, 4)), max_new_tokens=2000, min_new_tokens=2000, do_sample=False,
                         return_dict_in_generate=True)
    assert out.sequences.shape[1] == 2004 and len(sizes) == 2000
    assert len(set(sizes)) == 1 and all(layer.keys is None for layer in out.past_key_values.layers)


def test_a_converted_model_copies_and_pickles(tmp_path):
    """Its class (Tokenmix<Class>, made on demand) is found again by name: deepcopy and torch.save/load work."""
    model = _model("llama").eval()
    tokenmix.replace_attention(model, "linear")
    torch.save(model, tmp_path / "model.pt")
    ids = torch.randint(2, VOCAB, (1, N))
    for again in (copy.deepcopy(model), torch.load(tmp_path / "model.pt", weights_only=False)):
        assert type(again) is type(model) and torch.equal(again(ids).logits, model(ids).logits)



@pytest.mark.parametrize("name", GATED)
@pytest.mark.parametrize("family", sorted(CAUSAL))
def test_a_gated_mechanism_trains_on_the_models_own_q_k_v_without_leaking(family, name):
    """The model's projections feed the rule; the gates (beta, the decay, the output gate) are new projections of
    the module's hidden states, created as the paper initialises them; nothing later reaches an earlier position."""
    model = _model(family)
    assert tokenmix.replace_attention(model, name, **GATED_OPTIONS.get(name, {})) == 2
    mechanism = next(m for m in model.modules() if isinstance(m, HFMechanism))
    own = {n for n, _ in mechanism.named_parameters()}
    gates = mechanism.mixer.transferred  # the gates and the output norm: all it adds to the model
    assert own and all(n.removeprefix("mixer.").startswith(gates) for n in own)
    inputs, real = _batch(family)
    inputs["labels"] = inputs["input_ids"].masked_fill(~real, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = model(**inputs).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    ids = torch.randint(2, VOCAB, (2, N))
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    model(inputs_embeds=embeds).logits[:, 4].sum().backward()
    assert embeds.grad[:, 5:].abs().max() == 0 and embeds.grad[:, :5].abs().max() > 0


@pytest.mark.parametrize("name", GATED)
def test_a_gated_mechanism_computes_its_rule_on_the_modules_input(name):
    """Inside the model, the attention module's output is its own projections around the rule, the gates read from
    the module's input."""
    model = _model("gpt2").eval()
    tokenmix.replace_attention(model, name, **GATED_OPTIONS.get(name, {}))
    attn = model.transformer.h[1].attn
    seen = {}
    attn.register_forward_hook(lambda module, args, kwargs, out: seen.update(x=args[0] if args else
                                                                              kwargs["hidden_states"], out=out[0]),
                               with_kwargs=True)
    model(torch.randint(2, VOCAB, (2, N)))
    x = seen["x"]
    heads = [t.view(2, N, 4, 8).transpose(1, 2) for t in attn.c_attn(x).split(32, dim=2)]
    out = attn.tokenmix.mixer.attend_heads(*heads, hidden=x)
    assert torch.allclose(attn.c_proj(out.transpose(1, 2).reshape(2, N, 32)), seen["out"], atol=1e-6)
    assert not torch.allclose(attn.tokenmix.mixer.attend_heads(*heads, hidden=torch.zeros_like(x)), out, atol=1e-3)
    # that rule is the whole mixer's between its projections: test_mixer_contract, create_heads


@pytest.mark.parametrize("name", GATED)
def test_a_gated_mechanism_decodes_from_its_state_as_recomputation(name):
    """tokenmix.decoding from the (K, V) state per head gives what recomputing every prefix gives (plain generate:
    test_plain_generate_decodes_from_the_recurrent_state); the padding's content does not reach the real
    positions."""
    model = _model("llama").eval()
    tokenmix.replace_attention(model, name, **GATED_OPTIONS.get(name, {}))
    ids, mask = _left_padded()
    prompt = torch.randint(2, VOCAB, (2, 5))
    without = model.generate(prompt, max_new_tokens=6, do_sample=False, use_cache=False)
    with torch.no_grad(), tokenmix.decoding(model) as cache:
        assert torch.equal(model.generate(prompt, max_new_tokens=6, do_sample=False, past_key_values=cache), without)
    real = mask.bool()
    before = model(ids, attention_mask=mask).logits
    after = model(ids.masked_fill(~real, 7), attention_mask=mask).logits
    assert torch.allclose(before[real], after[real], atol=1e-6)


def test_a_gated_mechanism_refuses_a_key_value_cache_by_module():
    model = _model("llama").eval()
    tokenmix.replace_attention(model, "gated_deltanet")
    ids = torch.randint(2, VOCAB, (1, 6))
    out = model(ids[:, :5], use_cache=True, past_key_values=transformers.DynamicCache(config=model.config))
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn .*gates need every position's hidden states"):
        model(ids[:, 5:], past_key_values=out.past_key_values)
    with pytest.raises(ValueError, match=r"'gated_deltanet' .*causal only|causal=False is unsupported"):
        tokenmix.replace_attention(_model("bert"), "gated_deltanet")


def test_a_gated_model_round_trips_and_copies(tmp_path):
    """Its gates and the hooks that feed them come back: from_pretrained, load_converted and a deep copy give the
    same logits."""
    torch.manual_seed(0)
    model = _model("llama").eval()
    tokenmix.replace_attention(model, "gated_deltanet")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    ids = torch.randint(2, VOCAB, (2, N))
    want = model(ids).logits
    for loaded in (transformers.AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True),
                   tokenmix.load_converted(str(tmp_path)), copy.deepcopy(model)):
        assert torch.equal(loaded.eval()(ids).logits, want)


def test_retention_on_a_rotary_model_is_refused_unless_xpos_is_off():
    """RetNet rotates Q and K itself (xpos, on by default); Llama has already rotated them."""
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn .*xpos=True would rotate them a second time "
                                         r"\(pass xpos=False\)"):
        tokenmix.replace_attention(_model("llama"), "retention")
    assert tokenmix.replace_attention(_model("llama"), "retention", xpos=False) == 2
    assert tokenmix.replace_attention(_model("gpt2"), "retention") == 2  # absolute positions: RetNet's rotation on


@pytest.mark.parametrize("name", CAUSAL_QKV + GATED + ["window_linear"])
def test_a_bfloat16_model_trains_and_generates_in_bfloat16(name):
    """Every causal mechanism in a bfloat16 Llama: the loss and its gradients, and generate from the recurrent state,
    whose steps hand the model's output projection bfloat16 heads (window_linear's step gave float32 ones)."""
    torch.manual_seed(0)
    model = _model("llama").to(torch.bfloat16)
    tokenmix.replace_attention(model, name, **{**GATED_OPTIONS.get(name, {}),
                                               **({"window": 4} if name == "window_linear" else {})})
    ids = torch.randint(2, VOCAB, (2, N))
    out = model(ids, labels=ids)
    out.loss.backward()
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.loss)
    assert model.generate(ids[:, :4], max_new_tokens=4, min_new_tokens=4, do_sample=False).shape == (2, 8)
