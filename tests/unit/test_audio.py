"""Audio: AST/SSAST/timbre shapes, gradients, overfit, DeiT adaptation; fbank pipeline; bad audio; data; weights."""
import re

import numpy as np
import pytest
import soundfile as sf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hub
from audio.features import SAMPLE_RATE, audio_spec, fit_frames, log_mel, model_input, read_audio, trim_silence
from hub.errors import DataError, OfflineError
from hub.testing import assert_overfits, params_without_grad

FAMILIES = ["ast_tiny", "ssast_tiny", "timbre_attention"]


def tone(freq: float, rate: int = SAMPLE_RATE, seconds: float = 0.5, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    wave = 0.3 * np.sin(2 * np.pi * freq * t).astype(np.float32)
    return np.stack([wave] * channels, 1) if channels > 1 else wave


@pytest.mark.parametrize("name", FAMILIES + ["ast_deit_tiny"])
def test_forward_backward_reset(name):
    torch.manual_seed(0)
    model = hub.create_model(name, num_classes=7, target_frames=48)
    x = torch.randn(2, 128, 48)
    out = model(x)
    assert out.shape == (2, 7) and torch.isfinite(out).all()
    out.sum().backward()
    unused = {"mask_embed", "disc_head", "gen_head"}  # SSAST's pretext parameters train only in pretraining
    assert [n for n in params_without_grad(model) if n.split(".")[0] not in unused] == []
    assert model.forward_head(model.forward_features(x), pre_logits=True).shape == (2, model.num_features)
    model.reset_classifier(3)
    assert model(x).shape == (2, 3)
    logits, attentions = model(x, return_attention=True)
    assert logits.shape == (2, 3)
    torch.testing.assert_close(attentions[-1].sum(-1), torch.ones(attentions[-1].shape[:-1]))
    with pytest.raises(DataError, match=r"128 bins, 48 frames.*\(2, 64, 48\)"):
        model(torch.randn(2, 64, 48))


@pytest.mark.parametrize("name", ["ast_tiny", "timbre_attention"])
def test_overfits_eight_clips(name):
    torch.manual_seed(0)
    model = hub.create_model(name, num_classes=8, target_frames=32, drop_path_rate=0.0) if name == "ast_tiny" \
        else hub.create_model(name, num_classes=8, target_frames=32, dropout=0.0)
    x, y = torch.randn(8, 128, 32), torch.arange(8)
    assert_overfits(model, lambda: torch.nn.functional.cross_entropy(model(x), y))


def test_ast_patch_grid_and_tokens():
    model = hub.create_model("ast_tiny", target_frames=100)
    assert model.grid == (12, 9)  # (128 - 16) // 10 + 1, (100 - 16) // 10 + 1
    assert model.forward_features(torch.zeros(1, 128, 100)).shape == (1, 2 + 12 * 9, 128)


def test_ssast_pretext_losses_reach_the_pretext_heads():
    from hub.tasks import create_task

    torch.manual_seed(0)
    model = hub.create_model("ssast_tiny", num_masked=8)
    task = create_task("masked-patch-modelling")
    loss, scores, _ = task.step(model, (torch.randn(3, 128, 100), torch.full((3,), -1)), "train")
    assert scores.shape == (3, 8, 8) and torch.isfinite(loss)
    loss.backward()
    assert [n for n in params_without_grad(model) if not n.startswith("head.")] == []
    metric = task.metrics()
    metric.update(torch.eye(8).expand(3, -1, -1), None)
    assert float(metric.compute()["acc"]) == 1.0


def _random_deit(arch: str):
    import timm

    torch.manual_seed(0)
    return timm.create_model(arch, pretrained=False)


@pytest.mark.parametrize("arch,frames", [("deit_tiny_distilled_patch16_224", 100), ("vit_tiny_patch16_224", 200)])
def test_deit_weights_adapted_to_the_ast_grid(arch, frames):
    from audio.models.ast import adapt_deit_state_dict

    deit = _random_deit(arch)
    model = hub.create_model("ast_deit_tiny", target_frames=frames)
    state = adapt_deit_state_dict(deit.state_dict(), model)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert sorted(missing) == ["head.bias", "head.weight"] and not unexpected
    torch.testing.assert_close(model.patch_embed.weight, deit.patch_embed.proj.weight.sum(1, keepdim=True))
    prefix = deit.num_prefix_tokens
    grid = deit.pos_embed[0, prefix:].reshape(14, 14, -1)  # (196, D) -> (14, 14, D)
    ours = model.pos_embed[0, 2:].reshape(*model.grid, -1)  # (gf * gt, D) -> (gf, gt, D)
    if frames == 100:  # 12 x 9 patches: the centre 12 rows and 9 columns of the 14 x 14 image grid
        torch.testing.assert_close(ours, grid[1:13, 2:11])
    else:  # 19 time patches: interpolated from 14
        assert model.grid[1] == 19 and torch.isfinite(ours).all()
    assert torch.equal(model.dist_token, deit.dist_token if prefix == 2 else deit.cls_token)
    assert model(torch.randn(1, 128, frames)).shape == (1, 10)


def test_imagenet_init_offline_fails_clearly(monkeypatch):
    monkeypatch.setenv("HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # read once, at its first import
    with pytest.raises(OfflineError, match="deit_tiny_distilled_patch16_224.*not in the cache"):
        hub.create_model("ast_deit_tiny", imagenet_init=True)


def test_fbank_shapes_cut_pad_and_normalisation():
    spec = log_mel(torch.randn(SAMPLE_RATE))
    assert spec.shape == (128, 98)  # 1 s: 1 + (16000 - 400) // 160 frames
    assert fit_frames(spec, 50).shape == (128, 50) and torch.equal(fit_frames(spec, 50), spec[:, :50])
    padded = fit_frames(spec, 120, pad_value=-1.0)
    assert padded.shape == (128, 120) and (padded[:, 98:] == -1).all()


def test_time_fit_stretches_whole_clips(tmp_path):
    from hub.core.registry import get_dataset_entry

    ramp = torch.arange(1.0, 101.0).repeat(128, 1)  # (F, 100): frame t holds t + 1
    torch.testing.assert_close(fit_frames(ramp, 50, time_fit="stretch")[0], torch.arange(50.0) * 2 + 1.5)
    longer = fit_frames(ramp[:, :20], 50, time_fit="stretch")  # a short clip spans all 50 frames, no padding
    assert longer.shape == (128, 50) and longer.min() == 1 and longer.max() == 20 and (longer.diff(dim=1) >= 0).all()
    with pytest.raises(DataError, match="time_fit must be one of"):
        fit_frames(ramp, 50, time_fit="crop")
    with pytest.raises(DataError, match="time_fit must be one of"):
        get_dataset_entry("audio_folder").builder(str(tmp_path), time_fit="crop")  # refused before any file is read
    rolls = {fit: get_dataset_entry("audio_folder").builder(str(tmp_path), time_fit=fit).augment["time_shift"]
             for fit in ("cut", "stretch")}
    assert rolls == {"cut": 10, "stretch": 0}  # a roll would wrap a stretched word's end round to its start
    wave = torch.sin(torch.linspace(0, 800 * 6.28, 7000)) * torch.linspace(0, 1, 7000)
    sf.write(tmp_path / "tone.wav", wave.numpy(), SAMPLE_RATE)
    spec = audio_spec(64, mean=0.0, std=1.0, time_fit="stretch")
    torch.testing.assert_close(model_input(tmp_path / "tone.wav", spec),
                               fit_frames(log_mel(read_audio(tmp_path / "tone.wav")), 64, time_fit="stretch"))


def test_trim_silence_drops_quiet_ends_only(tmp_path):
    from hub.core.registry import get_dataset_entry

    db = torch.tensor([-50.0, -40, 0, -3, -45, -2, 0, -30, -60])  # frame energies in dB; a pause in the middle
    spec = (db / 4.3429448).repeat(128, 1)  # (F, 9) in nats, as Kaldi's log fbank
    torch.testing.assert_close(trim_silence(spec, 20.0), spec[:, 2:7])  # ends below -20 dB go, the pause stays
    assert torch.equal(trim_silence(spec, 45.0), spec[:, 1:8]) and trim_silence(spec, None) is spec
    for bad in (0, -10.0):
        with pytest.raises(DataError, match="trim_db must be a positive level in dB"):
            get_dataset_entry("fsdd").builder(trim_db=bad)  # refused before any file is read
    t = torch.arange(6000) / SAMPLE_RATE
    tone = torch.sin(2 * torch.pi * 500 * t)
    quiet = 1e-3 * torch.randn(3200, generator=torch.Generator().manual_seed(0))  # 0.2 s at -60 dB
    sf.write(tmp_path / "padded.wav", torch.cat([quiet, tone, quiet]).numpy(), SAMPLE_RATE)
    padded = log_mel(read_audio(tmp_path / "padded.wav"))
    frames = log_mel(tone).shape[1]
    assert padded.shape[1] >= frames + 38  # 0.4 s of quiet noise added
    assert 0 <= trim_silence(padded, 20.0).shape[1] - frames <= 4  # back to the tone, and windows over its edges
    spec = audio_spec(64, mean=0.0, std=1.0, time_fit="stretch", trim_db=20.0)
    torch.testing.assert_close(model_input(tmp_path / "padded.wav", spec),
                               fit_frames(trim_silence(padded, 20.0), 64, time_fit="stretch"))


def test_lifter_projects_onto_the_first_dct_coefficients(tmp_path):
    from scipy.fft import dct, idct

    t = torch.arange(SAMPLE_RATE // 2) / SAMPLE_RATE
    wave = sum(torch.sin(2 * torch.pi * 120 * k * t) / k for k in range(1, 30))  # a 120 Hz voice-like pulse train
    wave = 0.5 * wave / wave.abs().max()
    raw = log_mel(wave)
    coefficients = dct(raw.double().numpy(), axis=0, norm="ortho")  # naive reference: DCT-II over the mel bins
    coefficients[20:] = 0
    expected = torch.from_numpy(idct(coefficients, axis=0, norm="ortho")).float()
    torch.testing.assert_close(log_mel(wave, lifter=20), expected, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(log_mel(wave, lifter=128), raw, atol=1e-3, rtol=1e-4)  # every coefficient kept
    low = slice(5, 40)  # mel bins below ~1 kHz, where the harmonics are resolved: their ripple is smoothed away
    assert log_mel(wave, lifter=20)[low].diff(dim=0).abs().mean() < 0.5 * raw[low].diff(dim=0).abs().mean()
    sf.write(tmp_path / "voice.wav", wave.numpy(), SAMPLE_RATE, subtype="FLOAT")
    spec = audio_spec(64, mean=0.0, std=1.0, lifter=20)
    torch.testing.assert_close(model_input(tmp_path / "voice.wav", spec), fit_frames(expected, 64),
                               atol=1e-3, rtol=1e-4)
    with pytest.raises(DataError, match="lifter must be in 1..128"):
        log_mel(wave, lifter=0)


def test_stereo_is_averaged_and_rates_are_resampled(tmp_path):
    sf.write(tmp_path / "mono16.wav", tone(440), SAMPLE_RATE)
    stereo = tone(440, channels=2)
    stereo[:, 1] = 0.0
    sf.write(tmp_path / "stereo16.flac", stereo, SAMPLE_RATE)
    sf.write(tmp_path / "mono8.wav", tone(440, rate=8000), 8000)
    mono = read_audio(tmp_path / "mono16.wav")
    torch.testing.assert_close(read_audio(tmp_path / "stereo16.flac"), mono / 2, atol=1e-4, rtol=0)
    resampled = read_audio(tmp_path / "mono8.wav")
    assert resampled.shape == mono.shape
    peak = lambda w: int(log_mel(w).mean(1).argmax())  # noqa: E731  (the mel bin of the tone)
    assert peak(resampled) == peak(mono)


@settings(max_examples=15, deadline=None)
@given(rate=st.sampled_from([8000, 11025, 16000, 22050, 44100, 48000]), channels=st.integers(1, 3),
       seconds=st.floats(0.05, 1.5))
def test_any_rate_and_channel_count_gives_the_model_input(tmp_path_factory, rate, channels, seconds):
    path = tmp_path_factory.mktemp("clips") / "clip.wav"
    sf.write(path, tone(300, rate, seconds, channels), rate)
    assert read_audio(path).shape[0] == pytest.approx(seconds * SAMPLE_RATE, abs=SAMPLE_RATE / rate + 2)
    x = model_input(path, audio_spec(64, mean=-8.0, std=4.0))
    assert x.shape == (128, 64) and torch.isfinite(x).all()


def test_bad_audio_files_name_the_file(tmp_path):
    sf.write(tmp_path / "empty.wav", np.zeros(0, dtype=np.float32), SAMPLE_RATE)
    sf.write(tmp_path / "silent.wav", np.zeros(8000, dtype=np.float32), SAMPLE_RATE)
    sf.write(tmp_path / "short.wav", tone(440, seconds=0.01), SAMPLE_RATE)
    sf.write(tmp_path / "nan.wav", np.full(8000, np.nan, dtype=np.float32), SAMPLE_RATE, subtype="FLOAT")
    (tmp_path / "corrupt.wav").write_bytes(b"RIFF not really a wave file")
    cases = {"empty.wav": "empty", "silent.wav": "silent", "short.wav": "10.0 ms long", "nan.wav": "NaN",
             "corrupt.wav": "cannot read audio", "missing.wav": "does not exist"}
    for name, message in cases.items():
        with pytest.raises(DataError, match=f"{name}.*{message}|{message}.*{name}"):
            read_audio(tmp_path / name)


def _tone_folder(root, per_class: int = 6):
    """Two classes of tones at mixed rates, mono and stereo, WAV and FLAC."""
    for label, freq in (("low", 300.0), ("high", 2500.0)):
        (root / label).mkdir(parents=True)
        for i in range(per_class):
            rate, channels, suffix = [(8000, 1, "wav"), (22050, 2, "flac"), (44100, 1, "wav")][i % 3]
            sf.write(root / label / f"{label}{i}.{suffix}",
                     tone(freq * (1 + 0.02 * i), rate, 0.3 + 0.05 * i, channels), rate)
    return root


def test_audio_folder_data_and_its_errors(tmp_path):
    from hub.core.registry import get_dataset_entry

    build = get_dataset_entry("audio_folder").builder
    data = build(str(_tone_folder(tmp_path / "ok")), target_frames=40, val_fraction=0.25, test_fraction=0.25)
    data.setup()
    assert data.label_names == ["high", "low"] and data.info["sizes"] == [6, 3, 3]
    x, target = data.train_set[(0, 0)]
    assert x.shape == (128, 40) and target.shape == (2,) and float(target.sum()) == pytest.approx(1.0)
    assert data.input_spec["kind"] == "audio" and data.input_spec["std"] > 0
    (tmp_path / "one" / "only").mkdir(parents=True)
    sf.write(tmp_path / "one" / "only" / "a.wav", tone(300), SAMPLE_RATE)
    (tmp_path / "hole" / "a").mkdir(parents=True)
    (tmp_path / "hole" / "b").mkdir()
    sf.write(tmp_path / "hole" / "a" / "a.wav", tone(300), SAMPLE_RATE)
    bad = _tone_folder(tmp_path / "bad")
    sf.write(bad / "low" / "quiet.wav", np.zeros(4000, dtype=np.float32), SAMPLE_RATE)
    (tmp_path / "flat").mkdir()
    cases = {"missing": "does not exist", "flat": "no class folders", "one": "single class",
             "hole": r"\['b'\].*hold no audio", "bad": "quiet.wav is silent"}
    for folder, message in cases.items():
        with pytest.raises(DataError, match=message):
            build(str(tmp_path / folder), target_frames=40, val_fraction=0.25, test_fraction=0.25).setup()
    with pytest.raises(DataError, match="12 samples of 2 classes are too few"):
        build(str(tmp_path / "ok"), target_frames=40, val_fraction=0.05, test_fraction=0.05).setup()


def test_augmentation_is_seeded_by_epoch_and_index():
    from audio.data import SpectrogramAugment

    specs, labels = torch.randn(6, 128, 40), torch.arange(6) % 3
    aug = SpectrogramAugment(specs, labels, 3, seed=1, freq_mask=8, time_mask=8, time_shift=4, noise=0.2, mixup=1.0)
    a, b, other = aug[(2, 5)], aug[(2, 5)], aug[(2, 6)]
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], other[0])
    assert float(a[1].sum()) == pytest.approx(1.0) and a[1].max() < 1.0  # mixup: a soft target


def test_spectral_tilt_is_a_smooth_curve_the_same_in_every_frame():
    import torchaudio

    from audio.data import SpectrogramAugment

    specs, labels = torch.randn(3, 128, 40), torch.arange(3)
    offset = SpectrogramAugment(specs, labels, 3, seed=0, tilt=1.0)[1][0] - specs[1]  # (F, T)
    curve = offset[:, 0]  # (F,)
    assert torch.allclose(offset, curve[:, None].expand_as(offset), atol=1e-5) and curve.abs().max() > 0.01
    dct = torchaudio.functional.create_dct(4, 128, "ortho")  # (F, 4)
    assert torch.allclose(dct[:, 1:] @ (dct[:, 1:].T @ curve), curve, atol=1e-5)  # in the span of bases 1-3
    assert abs(float(curve.sum())) < 1e-4  # the level (coefficient 0) is left alone


def test_mel_warp_moves_a_formant_and_keeps_the_frames():
    from audio.data import SpectrogramAugment
    from audio.features import warp_mel_bins
    from hub.core.registry import get_dataset_entry

    spec = torch.zeros(128, 5)
    spec[40] = 1.0  # a "formant" at bin 40 in every frame
    assert torch.equal(warp_mel_bins(spec, 1.0), spec)
    assert warp_mel_bins(spec, 0.8).argmax(0).tolist() == [50] * 5  # bin 50 reads 40: formant up (a shorter tract)
    assert warp_mel_bins(spec, 1.25).argmax(0).tolist() == [32] * 5  # bin 32 reads 40: formant down (a longer tract)
    ramp = torch.arange(128.0)[:, None].expand(128, 3)
    torch.testing.assert_close(warp_mel_bins(ramp, 1.5)[:80], 1.5 * ramp[:80])  # linear interpolation
    assert torch.equal(warp_mel_bins(ramp, 1.5)[100:], torch.full((28, 3), 127.0))  # the top bin past the end
    specs, labels = torch.randn(3, 128, 40), torch.arange(3)
    warped = SpectrogramAugment(specs, labels, 3, seed=0, warp=0.1)[(0, 1)][0]
    assert warped.shape == (128, 40) and not torch.equal(warped, specs[1])
    for bad in (-0.1, 1.0):
        with pytest.raises(DataError, match=r"warp must lie in \[0, 1\)"):
            get_dataset_entry("fsdd").builder(warp=bad)


def test_spectrogram_explanations_and_overlay(tmp_path):
    from audio.explain import explain_spectrogram, save_spectrogram_overlay

    x = torch.randn(2, 128, 100)
    for name in FAMILIES:
        maps = explain_spectrogram(hub.create_model(name), x)
        assert maps.shape == (2, 128, 100) and maps.min() >= 0 and maps.max() <= 1
    save_spectrogram_overlay(x[0], maps[0], tmp_path / "overlay.png", "test")
    assert (tmp_path / "overlay.png").stat().st_size > 1000


@pytest.mark.parametrize("bad", [[3], [1, 1], [2, 10], [-1, 4], [0, 1.0], [True, 2], "01234"])
def test_fsdd_digits_must_be_two_or_more_distinct_digits(bad):
    from hub.core.registry import get_dataset_entry

    with pytest.raises(DataError, match=r"digits must be a list of at least two distinct FSDD digits \(integers "
                                        r"0-9\), got " + re.escape(repr(bad))):
        get_dataset_entry("fsdd").builder(digits=bad)  # refused before any file is read


def test_audio_folder_test_split_must_hold_the_training_classes(tmp_path, capsys):
    from hub.cli import main

    root = tmp_path / "tones"
    _tone_folder(root / "train", per_class=8)
    for label in ("buzz", "low"):
        (root / "test" / label).mkdir(parents=True)
        sf.write(root / "test" / label / "a.wav", tone(900), SAMPLE_RATE)
    assert main(["finetune", "ast_tiny", "--data", str(root), "--output-dir", str(tmp_path / "runs")]) == 2
    assert "test has classes ['buzz', 'low'] but" in capsys.readouterr().err and not (tmp_path / "runs").exists()
