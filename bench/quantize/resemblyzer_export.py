"""Export step of bench/quantize/resemblyzer.py, run by Debian's /usr/bin/python3 (torch, scipy).

    /usr/bin/python3 bench/quantize/resemblyzer_export.py WHEEL_DIR WORK_DIR CLIP.wav ...

WHEEL_DIR holds the unpacked `Resemblyzer` wheel (resemblyzer/pretrained.pt). Writes
WORK_DIR/resemblyzer.onnx (input `mels` [partials, frames, 40], output `embeds` [partials, 256],
both dims dynamic) and WORK_DIR/clips.npz (one array of mel partials per clip, named by the clip).

The preprocessing is Resemblyzer's (resemblyzer/audio.py, hparams.py) in numpy/scipy instead of
librosa and webrtcvad: resample to 16 kHz (scipy's polyphase filter where Resemblyzer uses
librosa's), normalize the volume to -30 dBFS (increase only), the 40-band Slaney mel power
spectrogram of a 25 ms Hann window every 10 ms (librosa's defaults: centred frames, zero padding,
no log), split into 160-frame partials at 1.3 partials a second. The VAD's trimming of long
silences is left out (webrtcvad is a C extension; the alsa clips are single short words with
little silence): the embeddings are those of the untrimmed clips, for the float and every
quantized model alike.
"""
import os
import sys
import wave

import numpy as np
import torch
from scipy.signal import resample_poly
from torch import nn

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160
RATE = 1.3
MIN_COVERAGE = 0.75
TARGET_DBFS = -30
INT16_MAX = 2**15 - 1


def read_wav(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2, f"{path}: 16-bit PCM expected"
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32)
        data = data.reshape(-1, w.getnchannels()).mean(axis=1) / 32768.0
        rate = w.getframerate()
    if rate != SAMPLE_RATE:
        g = np.gcd(rate, SAMPLE_RATE)
        data = resample_poly(data, SAMPLE_RATE // g, rate // g).astype(np.float32)
    return data


def normalize_volume(wav):
    rms = np.sqrt(np.mean((wav * INT16_MAX) ** 2))
    change = TARGET_DBFS - 20 * np.log10(rms / INT16_MAX)
    return wav if change < 0 else wav * (10 ** (change / 20))


def hz_to_mel(f):  # Slaney's scale: linear below 1 kHz, logarithmic above (librosa htk=False)
    f = np.asarray(f, dtype=np.float64)
    mel = f / (200.0 / 3)
    log_part = f >= 1000.0
    return np.where(log_part, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)


def mel_to_hz(m):
    m = np.asarray(m, dtype=np.float64)
    f = m * (200.0 / 3)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), f)


def mel_filters():
    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    mel_points = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(SAMPLE_RATE / 2), N_MELS + 2))
    widths = np.diff(mel_points)
    ramps = mel_points[:, None] - fft_freqs[None, :]
    weights = np.zeros((N_MELS, len(fft_freqs)))
    for i in range(N_MELS):
        lower = -ramps[i] / widths[i]
        upper = ramps[i + 2] / widths[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_points[2:N_MELS + 2] - mel_points[:N_MELS]))[:, None]  # Slaney norm
    return weights


def mel_spectrogram(wav):
    padded = np.pad(wav, (N_FFT // 2, N_FFT // 2))
    n_frames = 1 + (len(padded) - N_FFT) // HOP
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    power = np.abs(np.fft.rfft(padded[idx] * window, axis=1)) ** 2
    return (power @ mel_filters().T).astype(np.float32)  # [frames, 40]


def partial_slices(n_samples):
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    frame_step = int(np.round((SAMPLE_RATE / RATE) / HOP))
    steps = max(1, n_frames - PARTIAL_FRAMES + frame_step + 1)
    starts = list(range(0, steps, frame_step))
    last = starts[-1] * HOP
    coverage = (n_samples - last) / (PARTIAL_FRAMES * HOP)
    if coverage < MIN_COVERAGE and len(starts) > 1:
        starts = starts[:-1]
    return starts


def clip_partials(path):
    wav = normalize_volume(read_wav(path))
    starts = partial_slices(len(wav))
    need = (starts[-1] + PARTIAL_FRAMES) * HOP
    if need >= len(wav):
        wav = np.pad(wav, (0, need - len(wav)))
    mel = mel_spectrogram(wav)
    return np.stack([mel[s:s + PARTIAL_FRAMES] for s in starts])


class VoiceEncoder(nn.Module):  # resemblyzer/voice_encoder.py's network, its forward unchanged
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(N_MELS, 256, 3, batch_first=True)
        self.linear = nn.Linear(256, 256)
        self.relu = nn.ReLU()

    def forward(self, mels):
        _, (hidden, _) = self.lstm(mels)
        raw = self.relu(self.linear(hidden[-1]))
        return raw / torch.norm(raw, dim=1, keepdim=True)


def main():
    wheel_dir, work = sys.argv[1], sys.argv[2]
    clips = sys.argv[3:]
    model = VoiceEncoder()
    state = torch.load(os.path.join(wheel_dir, "resemblyzer", "pretrained.pt"), map_location="cpu")
    missing, unexpected = model.load_state_dict(state["model_state"], strict=False)
    assert not missing, f"weights missing from pretrained.pt: {missing}"
    print(f"export: loaded pretrained.pt (unused entries: {unexpected})")
    model.eval()
    parts = {os.path.splitext(os.path.basename(c))[0]: clip_partials(c) for c in clips}
    np.savez(os.path.join(work, "clips.npz"), **parts)
    example = torch.from_numpy(next(iter(parts.values())))
    torch.onnx.export(model, example, os.path.join(work, "resemblyzer.onnx"), opset_version=14,
                      input_names=["mels"], output_names=["embeds"],
                      dynamic_axes={"mels": {0: "partials", 1: "frames"}, "embeds": {0: "partials"}})
    with torch.no_grad():
        ref = {k: model(torch.from_numpy(v)).numpy() for k, v in parts.items()}
    np.savez(os.path.join(work, "torch_embeds.npz"), **ref)
    print(f"export: {len(parts)} clips, {sum(len(v) for v in parts.values())} partials")


if __name__ == "__main__":
    main()
