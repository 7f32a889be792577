"""Prompts in vLLM's formats into decoder ids and encoder inputs: every prompt form per model kind, the default
decoder prompts (seeds/vllm-encoder-decoder-infrastructure.md section 1, Whisper's generation config), the
decoder start token rule, audio resampling, and the errors bad requests get."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BartConfig, GenerationConfig, LlamaConfig, MBartConfig, PreTrainedTokenizerFast

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.checkpoints.whisper_ct2 import whisper_generation_config
from tt_models.engine.inputs import InputProcessor, ProcessedInputs
from tt_models.engine.prompts import ExplicitEncoderDecoderPrompt, TextPrompt, TokensPrompt

WORDS = ["<s>", "<pad>", "</s>", "<unk>", "the", "rain", "in", "spain", "falls", "mainly", "on", "hello", "world"]
BOS, EOS = 0, 2
THE_RAIN = [4, 5, 6, 7]  # "the rain in spain"
SOT, EN, DE, TRANSCRIBE, TRANSLATE, NO_TIMESTAMPS = 50257, 50258, 50260, 50358, 50357, 50362  # tiny.en's ids


def word_tokenizer(template: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over WORDS whose special tokens follow ``template`` (BART: ``<s> $A </s>``)."""
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single=template, special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def llama() -> InputProcessor:
    config = LlamaConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8)
    return InputProcessor(config, word_tokenizer("<s> $A"), max_model_len=8)


def bart_config(cls=BartConfig):
    return cls(vocab_size=256, d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=1,
               decoder_attention_heads=1, encoder_ffn_dim=8, decoder_ffn_dim=8, max_position_embeddings=32)


@pytest.fixture(scope="module")
def bart() -> InputProcessor:
    return InputProcessor(bart_config(), word_tokenizer("<s> $A </s>"), max_model_len=8, max_encoder_len=6)


@pytest.fixture(scope="module")
def whisper_checkpoint():
    return load_hf_checkpoint("whisper-tiny.en")


@pytest.fixture(scope="module")
def whisper(whisper_checkpoint) -> InputProcessor:
    c = whisper_checkpoint
    return InputProcessor(c.config, c.tokenizer, processor=c.processor, generation_config=c.generation_config,
                          max_model_len=448)


@pytest.fixture(scope="module")
def multilingual(whisper_checkpoint) -> InputProcessor:
    """tiny.en's config and tokenizer with the generation config the loader builds for multilingual Whisper."""
    c = whisper_checkpoint
    generation = whisper_generation_config(c.tokenizer, {}, 51865)
    return InputProcessor(c.config, c.tokenizer, processor=c.processor, generation_config=generation,
                          max_model_len=448)


def sine(rate: int, seconds: float = 2.0, frequency: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def audio_prompt(audio, prompt: str = "") -> TextPrompt:
    return TextPrompt(prompt=prompt, multi_modal_data={"audio": audio})


def features(inputs: ProcessedInputs) -> torch.Tensor:
    return inputs.encoder_input["input_features"]


# ------------------------------------------------------------------------------------------ decoder-only


def test_decoder_only_prompt_forms(llama):
    text = llama.process("the rain in spain")
    assert text == ProcessedInputs([BOS, *THE_RAIN], "the rain in spain")  # special tokens added, as vLLM does
    assert llama.process(TextPrompt(prompt="the rain in spain")) == text
    assert llama.process(TokensPrompt(prompt_token_ids=[5, 4])) == ProcessedInputs([5, 4], None)
    assert llama.process(TokensPrompt(prompt_token_ids=[5], prompt="rain")) == ProcessedInputs([5], "rain")
    assert llama.process([7, 6]) == ProcessedInputs([7, 6], None)
    assert (text.encoder_prompt_token_ids, text.encoder_input, text.encoder_len) == (None, None, 0)


# ------------------------------------------------------------------------------------------ BART / MBart


@pytest.mark.parametrize("prompt, text", [
    ("the rain in spain", "the rain in spain"),
    (TextPrompt(prompt="the rain in spain"), "the rain in spain"),
    (TokensPrompt(prompt_token_ids=[BOS, *THE_RAIN, EOS]), None),
    ([BOS, *THE_RAIN, EOS], None),
])
def test_bart_singleton_is_the_encoder_prompt_with_default_decoder_prompt(bart, prompt, text):
    inputs = bart.process(prompt)
    assert inputs.encoder_prompt_token_ids == [BOS, *THE_RAIN, EOS] and inputs.encoder_prompt == text
    assert inputs.prompt_token_ids == [2, 0] and inputs.prompt is None  # <DEC><BOS>
    ids = inputs.encoder_input["input_ids"]
    assert ids.dtype == torch.long and ids.tolist() == [BOS, *THE_RAIN, EOS] and inputs.encoder_len == 6


def test_bart_seed_explicit_example_keeps_a_decoder_prompt_that_starts_with_dec(bart):
    prompt = ExplicitEncoderDecoderPrompt(encoder_prompt=TextPrompt(prompt="the rain in spain"),
                                          decoder_prompt=[2, 0, 51, 178, 2])
    inputs = bart.process(prompt)
    assert inputs.prompt_token_ids == [2, 0, 51, 178, 2] and inputs.encoder_prompt_token_ids == [0, 4, 5, 6, 7, 2]
    assert inputs.encoder_prompt == "the rain in spain"


@pytest.mark.parametrize("decoder, expected, text", [
    ([0, 11], [2, 0, 11], None),  # <DEC> prepended when missing
    (TokensPrompt(prompt_token_ids=[]), [2], None),
    ("hello world", [2, BOS, 11, 12, EOS], "hello world"),  # text tokenized as the encoder's: with specials
    (TextPrompt(prompt="hello"), [2, BOS, 11, EOS], "hello"),
    (None, [2, 0], None),
])
def test_bart_explicit_decoder_prompt_gets_decoder_start(bart, decoder, expected, text):
    inputs = bart.process(ExplicitEncoderDecoderPrompt(encoder_prompt=[4, 5], decoder_prompt=decoder))
    assert (inputs.prompt_token_ids, inputs.prompt, inputs.encoder_prompt_token_ids) == (expected, text, [4, 5])


def test_mbart_without_decoder_start_falls_back_to_bos():
    config = bart_config(MBartConfig)
    assert config.decoder_start_token_id is None and config.bos_token_id == 0
    mbart = InputProcessor(config, word_tokenizer("<s> $A </s>"), max_model_len=8)
    assert mbart.process("the rain").prompt_token_ids == [0]  # <DEC> is <BOS>: [<BOS>] already starts with it
    assert mbart.process({"encoder_prompt": [4], "decoder_prompt": [11]}).prompt_token_ids == [0, 11]
    assert mbart.max_encoder_len == 32  # the model's max_position_embeddings by default


# ------------------------------------------------------------------------------------------ Whisper


def test_whisper_default_decoder_prompt_and_features(whisper, whisper_checkpoint):
    audio = sine(16000)
    inputs = whisper.process(audio_prompt((audio, 16000)))
    assert inputs.prompt_token_ids == [SOT, NO_TIMESTAMPS] and inputs.prompt is None  # English-only default
    assert (inputs.encoder_prompt_token_ids, inputs.encoder_prompt, inputs.encoder_len) == ([], None, 1500)
    hf = whisper_checkpoint.processor.feature_extractor(audio, sampling_rate=16000, return_tensors="pt")
    assert features(inputs).shape == (80, 3000) and features(inputs).dtype == torch.float32
    torch.testing.assert_close(features(inputs), hf["input_features"][0], rtol=0, atol=0)
    for same in (audio_prompt(audio), TokensPrompt(prompt_token_ids=[], multi_modal_data={"audio": [(audio, 16000)]}),
                 ExplicitEncoderDecoderPrompt(encoder_prompt=audio_prompt(audio), decoder_prompt=None)):
        other = whisper.process(same)
        assert other.prompt_token_ids == [SOT, NO_TIMESTAMPS] and torch.equal(features(other), features(inputs))


def test_whisper_previous_text_comes_first_as_hf_prompt_ids(whisper, whisper_checkpoint):
    """The OpenAI transcription ``prompt``: HF's ``get_prompt_ids`` (``<|startofprev|>`` and the text), then
    the default decoder prompt; at most ``max_target_positions // 2 - 1`` text tokens, the last ones."""
    audio = audio_prompt((sine(16000), 16000))
    text = "  Diane from New Jersey and Sheila from Texas. "
    hf_ids = whisper_checkpoint.processor.get_prompt_ids(text).tolist()
    assert whisper.process(audio, previous_text=text).prompt_token_ids == hf_ids + [SOT, NO_TIMESTAMPS]
    long = whisper.process(audio, previous_text="one two " * 400).prompt_token_ids
    assert len(long) == 1 + 223 + 2 and long[0] == hf_ids[0]
    with pytest.raises(ValueError, match="previous_text"):
        whisper.process(audio_prompt((sine(16000), 16000), "<|startoftranscript|>"), previous_text=text)


@pytest.mark.parametrize("decoder, expected", [
    ("<|startoftranscript|><|en|><|transcribe|><|notimestamps|>", [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS]),
    ("<|notimestamps|>", [SOT, NO_TIMESTAMPS]),  # <|startoftranscript|> prepended
    ("<|startoftranscript|><|notimestamps|> Hello", [SOT, NO_TIMESTAMPS, 18435]),  # " Hello"; no <|endoftext|>
    ([SOT, NO_TIMESTAMPS, 50], [SOT, NO_TIMESTAMPS, 50]),
])
def test_whisper_decoder_prompt_in_every_form(whisper, decoder, expected):
    audio = {"audio": (sine(16000, 0.5), 16000)}
    text = decoder if isinstance(decoder, str) else None
    singleton = (TextPrompt(prompt=decoder, multi_modal_data=audio) if text else
                 TokensPrompt(prompt_token_ids=decoder, multi_modal_data=audio))
    explicit = ExplicitEncoderDecoderPrompt(encoder_prompt=TextPrompt(prompt="", multi_modal_data=audio),
                                            decoder_prompt=decoder)
    for prompt in (singleton, explicit):
        inputs = whisper.process(prompt)
        assert (inputs.prompt_token_ids, inputs.prompt) == (expected, text)


def test_whisper_multilingual_default_language_and_task(multilingual, whisper):
    audio = audio_prompt(sine(16000, 0.5))
    assert multilingual.process(audio).prompt_token_ids == [SOT, EN, TRANSCRIBE, NO_TIMESTAMPS]
    for language in ("de", "german", "<|de|>"):
        assert multilingual.process(audio, language=language, task="translate").prompt_token_ids == [
            SOT, DE, TRANSLATE, NO_TIMESTAMPS]
    assert whisper.process(audio, language="en", task="transcribe").prompt_token_ids == [SOT, NO_TIMESTAMPS]


def test_resampling_8khz_gives_the_16khz_features(whisper):
    at_16k = features(whisper.process(audio_prompt((sine(16000), 16000))))
    at_8k = features(whisper.process(audio_prompt((sine(8000), 8000))))
    mislabelled = features(whisper.process(audio_prompt((sine(8000), 16000))))  # not resampled: a different sound
    assert at_8k.shape == at_16k.shape == (80, 3000)
    assert np.corrcoef(at_16k.flatten(), at_8k.flatten())[0, 1] > 0.999
    assert (at_16k - at_8k).abs().mean() < 1e-3 < (at_16k - mislabelled).abs().mean()
    wav = io.BytesIO()
    soundfile.write(wav, sine(8000), 8000, format="WAV", subtype="FLOAT")
    from_bytes = features(whisper.process(audio_prompt(wav.getvalue())))
    torch.testing.assert_close(from_bytes, at_8k, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------ bad input

TOO_LONG = "plus at least one output token is longer than the maximum model length of 8"
BAD_INPUTS = [
    ("llama", "", "The prompt is empty"),
    ("llama", [], "The prompt is empty"),
    ("llama", TokensPrompt(prompt_token_ids=[], prompt="x"), "The prompt is empty"),
    ("llama", [4, 16], r"Token id 16 in the prompt is out of vocabulary: .* 0 to 15"),
    ("llama", [-1], "Token id -1 in the prompt is out of vocabulary"),
    ("llama", list(range(8)), rf"The prompt \(length 8\) {TOO_LONG}"),
    ("llama", "the " * 7, rf"The prompt \(length 8\) {TOO_LONG}"),
    ("llama", {"encoder_prompt": "the", "decoder_prompt": None}, "ExplicitEncoderDecoderPrompt is for encoder-dec"),
    ("llama", TextPrompt(prompt="the", multi_modal_data={"audio": sine(16000)}), r"llama takes no multi-modal .*audio"),
    ("llama", {"prompt": "the", "cache_salt": "x"}, r"Unsupported TextPrompt keys \['cache_salt'\]"),
    ("llama", {"prompt_token_ids": [4], "mm_processor_kwargs": {}}, r"Unsupported TokensPrompt keys"),
    ("llama", 123, "must be a string, a list of token ids, a TextPrompt or a TokensPrompt; got int"),
    ("llama", None, "got NoneType"),
    ("llama", {"text": "the"}, "has neither 'prompt' nor 'prompt_token_ids'"),
    ("llama", {"prompt": 5}, "'prompt' must be a string, got int"),
    ("llama", [4, 1.5], "token ids must be integers, got 1.5"),
    ("llama", [True], "token ids must be integers, got True"),
    ("llama", {"prompt_token_ids": "the"}, "token ids must be a list of integers, got str"),
    ("bart", "", "The encoder prompt is empty"),
    ("bart", TextPrompt(prompt=""), "The encoder prompt is empty"),
    ("bart", {"encoder_prompt": [], "decoder_prompt": [2]}, "The encoder prompt is empty"),
    ("bart", "the rain in spain falls", r"encoder prompt \(length 7\) is longer than the maximum encoder length of 6"),
    ("bart", {"encoder_prompt": [4], "decoder_prompt": [2, 0, 4, 4, 4, 4, 4, 4]},
     rf"decoder prompt \(length 8\) {TOO_LONG}"),
    ("bart", {"encoder_prompt": [4], "decoder_prompt": [0, 4, 4, 4, 4, 4, 4]},  # 8 once <DEC> is prepended
     rf"decoder prompt \(length 8\) {TOO_LONG}"),
    ("bart", {"encoder_prompt": [4], "decoder_prompt": [256]}, "Token id 256 in the decoder prompt is out of vocab"),
    ("bart", [4, 300], "Token id 300 in the encoder prompt is out of vocabulary"),
    ("bart", TextPrompt(prompt="the", multi_modal_data={"image": object()}), r"bart takes no multi-modal .*image"),
    ("bart", {"encoder_prompt": "the", "decoder_prompt": None, "mm_processor_kwargs": {}}, "Unsupported Explicit"),
    ("bart", {"decoder_prompt": "the"}, "needs an encoder_prompt"),
    ("bart", {"encoder_prompt": {"encoder_prompt": "the"}, "decoder_prompt": None}, "cannot itself be an Explicit"),
    ("whisper", "hello", r"Whisper needs audio: multi_modal_data=\{'audio'"),
    ("whisper", TextPrompt(prompt="", multi_modal_data={"image": 1}), "Whisper needs audio"),
    ("whisper", TextPrompt(prompt="", multi_modal_data={"audio": sine(16000), "image": 1}), r"only audio.*\['image'\]"),
    ("whisper", audio_prompt("speech.wav"), r"Not audio: expected \(waveform, sample_rate\).* got str"),
    ("whisper", audio_prompt((np.zeros(16000, np.int16), 16000)), "must be floating point .* got int16"),
    ("whisper", audio_prompt(torch.zeros(16000, dtype=torch.int32)), "must be floating point .* got torch.int32"),
    ("whisper", audio_prompt(np.zeros((2, 16000), np.float32)), r"1-D mono with samples, got shape \(2, 16000\)"),
    ("whisper", audio_prompt(np.zeros(0, np.float32)), r"got shape \(0,\)"),
    ("whisper", audio_prompt(np.full(100, np.nan, np.float32)), "NaN or infinite"),
    ("whisper", audio_prompt(b"This is plain text, sorry"), "Not audio libsndfile can decode"),
    ("whisper", audio_prompt((sine(8000), 0)), "sample rate must be a positive integer"),
    ("whisper", audio_prompt((sine(8000), 16000.0)), "sample rate must be a positive integer"),
    ("whisper", audio_prompt((sine(8000), 8000, 1)), r"\(waveform, sample_rate\), got 3 items"),
    ("whisper", audio_prompt((sine(8000, 30.5), 8000)), r"longer than Whisper's 30 s window .* got 30.50 s"),
    ("whisper", audio_prompt([sine(8000), sine(8000)]), "one audio per request, got 2"),
    ("whisper", {"encoder_prompt": audio_prompt(sine(16000), "hi"), "decoder_prompt": None},
     "encoder takes only audio"),
    ("whisper", {"encoder_prompt": audio_prompt(sine(16000)), "decoder_prompt": audio_prompt(sine(16000), "<|en|>")},
     "decoder prompt cannot carry multi-modal data"),
    ("whisper", TokensPrompt(prompt_token_ids=[SOT] * 448, multi_modal_data={"audio": sine(16000)}),
     r"decoder prompt \(length 448\) plus at least one output token is longer than the maximum model length of 448"),
    ("whisper", TokensPrompt(prompt_token_ids=[51864], multi_modal_data={"audio": sine(16000)}),
     "Token id 51864 in the decoder prompt is out of vocabulary"),
]


@pytest.mark.parametrize("model, prompt, match", BAD_INPUTS)
def test_bad_input(request, model, prompt, match):
    with pytest.raises(ValueError, match=match):
        request.getfixturevalue(model).process(prompt)


def test_bad_language_or_task(bart, whisper, multilingual):
    audio = audio_prompt(sine(16000, 0.5))
    with pytest.raises(ValueError, match="language, task and previous_text are Whisper parameters; bart takes none"):
        bart.process("the", language="en")
    with pytest.raises(ValueError, match=r"English-only: it cannot take language='de'"):
        whisper.process(audio, language="de")
    with pytest.raises(ValueError, match="English-only"):
        whisper.process(audio, task="translate")
    with pytest.raises(ValueError, match=r"Unsupported language 'klingon'.*e\.g\. \['<\|en\|>'"):
        multilingual.process(audio, language="klingon")
    with pytest.raises(ValueError, match=r"Unsupported task 'summarize'.*\['transcribe', 'translate'\]"):
        multilingual.process(audio, task="summarize")
    with pytest.raises(ValueError, match="this request gives its own"):
        multilingual.process(audio_prompt(sine(16000, 0.5), "<|startoftranscript|>"), language="de")


def test_too_long_audio_bytes(whisper):
    wav = io.BytesIO()
    soundfile.write(wav, np.zeros(8000 * 31, np.float32), 8000, format="WAV")
    with pytest.raises(ValueError, match=r"longer than Whisper's 30 s window .* got 31.00 s"):
        whisper.process(audio_prompt(wav.getvalue()))


def test_whisper_default_prompts_need_its_generation_config_and_encoder_room(whisper_checkpoint):
    """Without Whisper's generation config (none, or HF's from the model config), the processor is built (the model
    runs on decoder prompts of its own) and a request for the default decoder prompt is refused, naming what it
    lacks (and, without a tokenizer, why it was not derived)."""
    c = whisper_checkpoint
    from_model_config = GenerationConfig.from_model_config(c.config)
    for generation_config, tokenizer, message in (
            (None, c.tokenizer, "lacks decoder_start_token_id, eos_token_id, no_timestamps_token_id$"),
            (from_model_config, c.tokenizer, "lacks no_timestamps_token_id$"),
            (from_model_config, None, "lacks no_timestamps_token_id, and the checkpoint has no tokenizer to derive "
                                      "them from$")):
        whisper = InputProcessor(c.config, tokenizer, processor=c.processor, generation_config=generation_config,
                                 max_model_len=448)
        own = TokensPrompt(prompt_token_ids=[SOT, NO_TIMESTAMPS], multi_modal_data={"audio": sine(16000, 0.5)})
        assert whisper.process(own).prompt_token_ids == [SOT, NO_TIMESTAMPS]
        with pytest.raises(ValueError, match=f"^Whisper's generation config {message}"):
            whisper.process(audio_prompt(sine(16000, 0.5)))
    with pytest.raises(ValueError, match="max_encoder_len 1000 is below Whisper's 1500 encoder positions"):
        InputProcessor(c.config, c.tokenizer, generation_config=c.generation_config, max_model_len=448,
                       max_encoder_len=1000)
