"""tokenmix.linearize: a softmax model made linear by T2R, Hedgehog or LoLCATs; the transfer trains only the feature
maps on each layer's own softmax teacher, passes the teacher's activations on, narrows the gap it reports, and
resumes from its checkpoint as if never stopped."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tokenmix
from tokenmix.conversion import attention_transfer, swapped_mechanisms


def _encoder(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def _data(batches: int = 4, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [2 * torch.randn(4, 12, 16, generator=g) for _ in range(batches)]


@pytest.mark.parametrize("method,measure", [("hedgehog", "weights_kl"), ("lolcats", "output_error")])
def test_the_transfer_narrows_each_layers_gap_and_trains_only_the_feature_maps(method, measure):
    model, swapped_only = _encoder(), _encoder()
    tokenmix.linearize(swapped_only, method=method, data=_data(), transfer_steps=0, progress=False)
    report = tokenmix.linearize(model, method=method, data=_data(), transfer_steps=60, progress=False)
    assert report.replaced == 2 and len(report.layers) == 2
    for gap in report.layers:
        assert getattr(gap, f"{measure}_after") < 0.8 * getattr(gap, f"{measure}_before"), gap
    assert report.transfer_losses[-1] < report.transfer_losses[0]
    start = dict(swapped_only.named_parameters())
    for name, p in model.named_parameters():  # only the feature maps moved; the copied weights did not
        assert torch.equal(p, start[name]) != (".phi" in name), name
    assert "layers.1.self_attn" in report.table() and "KL before" in report.table()


def test_during_the_transfer_each_layer_passes_its_teachers_output_on():
    original = _encoder()
    model = copy.deepcopy(original)
    tokenmix.replace_attention(model, "linear", copy_weights=True, feature_map="hedgehog")
    x = _data(1)[0]
    with torch.no_grad(), attention_transfer(model):
        assert torch.allclose(model(x), original(x), atol=1e-5)
    assert not torch.allclose(model(x), original(x), atol=1e-3)  # outside it: the linear mechanism itself


def test_t2r_swaps_and_fine_tunes_everything():
    model = _encoder()
    data = _data()
    target = torch.randn(4, 12, 16)
    report = tokenmix.linearize(model, method="t2r", data=data, finetune_steps=15, finetune_lr=1e-2,
                                loss_fn=lambda m, x: (m(x) - target).square().mean(), progress=False)
    assert report.transfer_losses == [] and len(report.finetune_losses) == 15
    assert report.finetune_losses[-1] < report.finetune_losses[0]
    assert all(m.feature_map == "t2r" for m in swapped_mechanisms(model).values())


def test_a_stopped_transfer_resumes_from_its_checkpoint_as_if_never_stopped(tmp_path):
    data = _data()
    straight = _encoder()
    tokenmix.linearize(straight, method="hedgehog", data=data, transfer_steps=6, progress=False)
    stopped = _encoder()
    checkpoint = tmp_path / "linearize.pt"
    tokenmix.linearize(stopped, method="hedgehog", data=data, transfer_steps=3, checkpoint=checkpoint,
                       checkpoint_every=3, progress=False)
    resumed = _encoder()
    report = tokenmix.linearize(resumed, method="hedgehog", data=data, transfer_steps=6, checkpoint=checkpoint,
                                checkpoint_every=3, progress=False)
    assert len(report.transfer_losses) == 6
    for (name, a), b in zip(straight.named_parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, msg=name)
    checkpoint.write_bytes(b"damaged")
    with pytest.raises(ValueError, match="linearize.pt cannot be read"):
        tokenmix.linearize(_encoder(), method="hedgehog", data=data, transfer_steps=6, checkpoint=checkpoint,
                           progress=False)


def test_a_hugging_face_model_is_linearized_and_fine_tuned():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=30, n_embd=32, n_layer=2, n_head=4, n_positions=32, attn_pdrop=0.0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": (ids := torch.randint(1, 30, (4, 16), generator=g)), "labels": ids} for _ in range(3)]
    report = tokenmix.linearize(model, method="hedgehog", data=data, transfer_steps=20, finetune_steps=5,
                                progress=False)
    assert report.replaced == 2 and len(report.finetune_losses) == 5
    assert all(g.weights_kl_after < g.weights_kl_before for g in report.layers)
    assert model.generate(data[0]["input_ids"][:1, :4], max_new_tokens=3, do_sample=False).shape == (1, 7)


def _gpt2_and_data(seed: int = 0):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=30, n_embd=32, n_layer=2, n_head=4, n_positions=32, attn_pdrop=0.0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    model.set_attn_implementation("eager")
    g = torch.Generator().manual_seed(seed + 1)
    return model, [{"input_ids": (ids := torch.randint(1, 30, (4, 16), generator=g)), "labels": ids}
                   for _ in range(3)]


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet", "gla", "retention", "mamba2"])
def test_a_gated_target_fits_its_gates_to_the_softmax_outputs(name):
    """LoLCATs' transfer to a gated mechanism: only its gates and output norm move (the model's own projections stay
    as they were), each layer's output gap narrows; during the transfer the teacher's outputs pass on, so the
    model computes what the softmax model did; Hedgehog's loss on weights and a feature_dim are refused."""
    original, data = _gpt2_and_data()
    model, swapped_only = copy.deepcopy(original), copy.deepcopy(original)
    tokenmix.linearize(swapped_only, name, method="lolcats", data=data, transfer_steps=0, progress=False)
    with torch.no_grad(), attention_transfer(swapped_only):
        torch.testing.assert_close(swapped_only(data[0]["input_ids"]).logits, original(data[0]["input_ids"]).logits,
                                   rtol=1e-5, atol=1e-5)
    report = tokenmix.linearize(model, name, method="lolcats", data=data, transfer_steps=40, progress=False)
    assert report.replaced == 2 and report.transfer_losses[-1] < report.transfer_losses[0]
    assert all(g.output_error_after < 0.8 * g.output_error_before for g in report.layers)
    fitted = swapped_mechanisms(model)["transformer.h.0.attn"].transferred
    start = dict(swapped_only.named_parameters())
    for param_name, p in model.named_parameters():
        assert torch.equal(p, start[param_name]) != (".tokenmix.mixer." in param_name
                                                     and param_name.split(".mixer.")[1].startswith(fitted)), param_name
    with pytest.raises(ValueError, match=f"'{name}' forms no attention weights for hedgehog"):
        tokenmix.linearize(copy.deepcopy(original), name, method="hedgehog", data=data, progress=False)
    with pytest.raises(ValueError, match=f"'{name}' has no feature map; feature_dim does not apply"):
        tokenmix.linearize(copy.deepcopy(original), name, method="lolcats", data=data, feature_dim=8, progress=False)


def test_t2r_takes_any_q_k_v_mechanism_without_a_map_and_fine_tunes_it():
    """T2R's recipe without a learned map: performer swapped in, the model fine-tuned (its loss falls); the transfer
    recipes have nothing to fit in it and are refused, naming t2r."""
    model, data = _gpt2_and_data()
    report = tokenmix.linearize(model, "performer", method="t2r", data=data, finetune_steps=8, finetune_lr=1e-2,
                                progress=False)
    assert report.replaced == 2 and report.finetune_losses[-1] < report.finetune_losses[0]
    assert all(type(m).__name__ == "Performer" for m in swapped_mechanisms(model).values())
    with pytest.raises(ValueError, match="'performer' has no learned feature map or gates to fit; .*method='t2r'"):
        tokenmix.linearize(_gpt2_and_data()[0], "performer", method="lolcats", data=data, progress=False)
    with pytest.raises(ValueError, match="'relation' does not compute on a model's Q, K and V"):
        tokenmix.linearize(_gpt2_and_data()[0], "relation", method="t2r", data=data, progress=False)


def test_refusals():
    data = _data(1)
    with pytest.raises(ValueError, match="method must be one of"):
        tokenmix.linearize(_encoder(), method="distill", data=data)
    with pytest.raises(ValueError, match="'performer' has no learned feature map or gates"):
        tokenmix.linearize(_encoder(), "performer", data=data)
    with pytest.raises(ValueError, match="T2R has no attention-transfer stage"):
        tokenmix.linearize(_encoder(), method="t2r", data=data, transfer_steps=10)
    with pytest.raises(ValueError, match="transfer_steps must be a non-negative int"):
        tokenmix.linearize(_encoder(), data=data, transfer_steps=-1)
    with pytest.raises(ValueError, match="no .loss"):
        tokenmix.linearize(_encoder(), data=data, transfer_steps=1, finetune_steps=1, progress=False)
    with pytest.raises(ValueError, match="no Q/K/V mechanism"):
        attention_transfer(_encoder())


def _tiny_gpt2_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_pdrop=0.0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    folder = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def test_convert_command_writes_a_model_that_loads_back_exactly(tmp_path, capsys):
    from tokenmix.cli import main

    folder = _tiny_gpt2_folder(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                    "must be in want of a wife. " * 20, encoding="utf-8")
    out = tmp_path / "linear"
    main(["convert", str(folder), "--text", str(text), "--out", str(out), "--bytes", "--length", "32",
          "--batch", "2", "--transfer-steps", "5", "--finetune-steps", "2"])
    printed = capsys.readouterr().out
    assert "KL before" in printed and "transformer.h.1.attn" in printed
    record = __import__("json").loads((out / "config.json").read_text())["tokenmix"]
    [step] = record["replacements"]
    assert step["mechanism"] == "linear" and step["options"]["feature_map"] == "hedgehog"
    assert len(record["notes"]["transfer_losses"]) == 5 and len(record["notes"]["finetune_losses"]) == 2
    loaded = tokenmix.load_converted(str(out))
    assert len(swapped_mechanisms(loaded)) == 2
    again = tokenmix.load_converted(str(out))
    ids = torch.randint(0, 256, (1, 10))
    assert torch.equal(loaded.eval()(ids).logits, again.eval()(ids).logits)
    window = tmp_path / "window"
    main(["convert", str(folder), "--text", str(text), "--out", str(window), "--bytes", "--length", "32",
          "--batch", "2", "--transfer-steps", "3", "--method", "lolcats", "--mechanism", "window_linear",
          "--window", "8"])
    hybrid = tokenmix.load_converted(str(window)).eval()
    assert {m.info.name for m in swapped_mechanisms(hybrid).values()} == {"window_linear"}
    assert all(m.window == 8 for m in swapped_mechanisms(hybrid).values())
    with pytest.raises(SystemExit, match="--window sets window_linear's window"):
        main(["convert", str(folder), "--text", str(text), "--out", str(tmp_path / "x"), "--bytes", "--window", "8"])
    with pytest.raises(SystemExit, match="no tokenizer"):
        main(["convert", str(folder), "--text", str(text), "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="fewer than one window"):
        main(["convert", str(folder), "--text", str(text), "--out", str(tmp_path / "x"), "--bytes",
              "--length", "5000"])


@pytest.mark.parametrize("family", ["torch", "gpt2"])
def test_low_rank_fine_tuning_moves_only_the_projections_and_is_merged(family):
    if family == "gpt2":
        transformers = pytest.importorskip("transformers")
        pytest.importorskip("peft")

        def make():
            torch.manual_seed(0)
            config = transformers.GPT2Config(vocab_size=30, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                             attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0,
                                             eos_token_id=0)
            return transformers.GPT2LMHeadModel(config)
        g = torch.Generator().manual_seed(1)
        data = [{"input_ids": (ids := torch.randint(1, 30, (4, 16), generator=g)), "labels": ids} for _ in range(3)]
        loss_fn = None
        moved = ("attn.c_attn", "attn.c_proj")
    else:
        pytest.importorskip("peft")
        make, data = _encoder, _data()
        target = torch.randn(4, 12, 16, generator=torch.Generator().manual_seed(2))  # not the suite's order
        loss_fn = lambda m, x: (m(x) - target).square().mean()  # noqa: E731
        moved = ("q_proj", "k_proj", "v_proj", "mixer.proj")
    transferred = make()
    tokenmix.linearize(transferred, method="lolcats", data=data, transfer_steps=5, progress=False)
    model = make()
    report = tokenmix.linearize(model, method="lolcats", data=data, transfer_steps=5, finetune_steps=10,
                                finetune="lora", lora_rank=2, finetune_lr=1e-2, loss_fn=loss_fn, progress=False)
    assert report.finetune_losses[-1] < report.finetune_losses[0]
    assert not any("lora" in n for n, _ in model.named_parameters())  # merged: the model's own layers again
    before = dict(transferred.named_parameters())
    for name, p in model.named_parameters():
        changed = not torch.equal(p, before[name])
        assert changed == (any(m in name for m in moved) and name.endswith("weight")), name


def test_a_tokenmix_model_learns_from_the_softmax_model_whose_weights_it_took():
    """The conversion of a trained tokenmix model: a linear-attention CausalLM given a softmax CausalLM's weights
    (its feature maps are its only new parameters) passes the softmax model's activations on during the transfer,
    and the transfer narrows each layer's gap."""
    from tokenmix.models import CausalLM

    torch.manual_seed(0)
    teacher = CausalLM(40, "softmax", 16, 2, 24, num_heads=2, dropout=0.0).eval()
    student = CausalLM(40, "linear", 16, 2, 24, num_heads=2, dropout=0.0, mixer_options={"feature_map": "hedgehog"})
    missing, unexpected = student.load_state_dict(teacher.state_dict(), strict=False)
    assert unexpected == [] and missing and all(".phi_" in name for name in missing)
    ids = torch.randint(0, 40, (3, 20))
    with torch.no_grad(), attention_transfer(student.eval()):
        torch.testing.assert_close(student(ids), teacher(ids))
    mechanisms = swapped_mechanisms(student)
    assert len(mechanisms) == 2 and all(m.causal for m in mechanisms.values())
    maps = [p for m in mechanisms.values() for n, p in m.named_parameters() if n.startswith("phi")]
    optimizer = torch.optim.Adam(maps, lr=1e-2)
    losses = []
    for _ in range(30):
        with attention_transfer(student.train(), "weights") as transfer:
            student(ids)
        loss = torch.stack(transfer.losses).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
