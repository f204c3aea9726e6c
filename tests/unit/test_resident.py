"""The fast image data path (:mod:`vision.resident`): batch augmentations do what they say per image, batches are
seeded by (seed, epoch, batch), shards of data parallelism partition an epoch, decoding is cached by content and
gives the pixels ``predict`` gives."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hub.errors import DataError
from vision.resident import (
    BatchAugment,
    ImageBatches,
    ResidentImages,
    cutout,
    decode_images,
    random_resized_crop,
    translate,
)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_translate_takes_one_reflect_padded_crop_per_image_with_offsets_that_vary():
    x = torch.arange(32 * 2 * 6 * 6, dtype=torch.float32).view(32, 2, 6, 6)
    out = translate(x, 2, _generator())
    padded = F.pad(x, (2,) * 4, mode="reflect")
    offsets = set()
    for i in range(len(x)):
        found = [(dy, dx) for dy in range(5) for dx in range(5)
                 if torch.equal(out[i], padded[i, :, dy:dy + 6, dx:dx + 6])]
        assert len(found) == 1
        offsets.add(found[0])
    assert len(offsets) > 5  # one draw per image, not one per batch


def test_flip_mirrors_about_half_of_the_images_and_cutout_zeroes_one_clipped_square():
    x = torch.randn(64, 3, 8, 8)
    out = BatchAugment(flip=True)(x, _generator())
    mirrored = [torch.equal(o, xi.flip(-1)) for o, xi in zip(out, x)]
    assert all(m or torch.equal(o, xi) for m, o, xi in zip(mirrored, out, x))
    assert 16 < sum(mirrored) < 48
    holed = cutout(x + 10, 3, _generator())  # +10: no pixel is 0 before
    zeroed = (holed == 0).all(dim=1)  # (B, H, W): every channel set
    assert torch.equal(zeroed, (holed == 0).any(dim=1))
    counts = zeroed.flatten(1).sum(1)
    assert (counts >= 4).all() and (counts <= 9).all() and (counts == 9).any()  # 3x3, or clipped at a border
    assert torch.equal(holed[~zeroed[:, None].expand_as(holed)], (x + 10)[~zeroed[:, None].expand_as(x)])


def test_random_resized_crop_of_the_whole_image_is_the_identity_and_smaller_crops_zoom():
    x = torch.randn(4, 3, 12, 12)
    assert torch.allclose(random_resized_crop(x, (1.0, 1.0), (1.0, 1.0), _generator()), x, atol=1e-5)
    zoomed = random_resized_crop(x, (0.25, 0.25), (1.0, 1.0), _generator())
    assert zoomed.shape == x.shape and not torch.allclose(zoomed, x, atol=1e-2)


def _batches(n=10, **kwargs):
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 1, 4, 4).contiguous()
    return ImageBatches(images, torch.arange(n), [0.0], [1 / 255], **kwargs)  # normalised pixel == index


def test_batches_cover_the_epoch_once_in_a_seeded_order_and_the_same_augmentation_on_a_second_pass():
    batches = _batches(batch_size=4, shuffle=True, seed=3, augment=BatchAugment(translate=1))
    first = list(batches)
    assert [len(y) for _, y in first] == [4, 4, 2] and len(batches) == 3
    labels = torch.cat([y for _, y in first])
    assert sorted(labels.tolist()) == list(range(10)) and labels.tolist() != list(range(10))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, batches))
    batches.sampler.set_epoch(1)  # Lightning's call
    assert torch.cat([y for _, y in batches]).tolist() != labels.tolist()
    assert len(_batches(batch_size=4, drop_last=True)) == 2
    with pytest.raises(DataError, match="batch_size must be at least 1"):
        _batches(batch_size=0)


def test_data_parallel_ranks_take_disjoint_shards_of_the_same_epoch_order(monkeypatch):
    shards = []
    for rank in range(2):
        batches = _batches(n=11, batch_size=3, shuffle=True, seed=1)
        monkeypatch.setattr(batches, "_shard", lambda rank=rank: (rank, 2))
        shards.append(torch.cat([y for _, y in batches]).tolist())
        assert len(batches) == 2  # 6 and 5 images in batches of 3
    assert sorted(shards[0] + shards[1]) == list(range(11)) and len(shards[0]) == 6


def _png_files(tmp_path, count=3):
    from PIL import Image

    rng = np.random.default_rng(0)
    files = []
    for i in range(count):
        files.append(tmp_path / f"{i}.png")
        Image.fromarray(rng.integers(0, 255, (10, 14, 3), dtype=np.uint8)).save(files[-1])
    return files


def test_decoding_is_cached_by_content_and_gives_predicts_pixels(tmp_path, monkeypatch):
    from PIL import Image

    from vision import io as vision_io
    from vision.io import image_spec, image_tensor

    monkeypatch.setenv("HUB_CACHE", str(tmp_path / "cache"))
    files = _png_files(tmp_path)
    spec = image_spec(8, 8, 1, [0.5], [0.25])
    images = decode_images(files, spec, progress=False)
    assert images.dtype == torch.uint8 and images.shape == (3, 1, 8, 8)
    resident = ResidentImages(images, [0, 1, 0], spec["mean"], spec["std"], files)
    assert torch.allclose(resident[1][0], image_tensor(files[1], spec)) and resident[1][1] == 1

    def no_decoding(*args):
        raise AssertionError("decoded again")

    monkeypatch.setattr(vision_io, "image_pixels", no_decoding)
    assert torch.equal(decode_images(files, spec), images)  # read from the cache
    Image.fromarray(np.zeros((10, 14, 3), dtype=np.uint8)).save(files[0])  # new content: a new key
    with pytest.raises(AssertionError, match="decoded again"):
        decode_images(files, spec)
    assert len(list((tmp_path / "cache" / "images").glob("*.safetensors"))) == 1


def test_resident_images_refuse_float_pixels_and_subset_keeps_files():
    with pytest.raises(DataError, match="uint8"):
        ResidentImages(torch.zeros(2, 1, 4, 4), [0, 1], [0.5], [0.5])
    resident = ResidentImages(torch.zeros(3, 1, 4, 4, dtype=torch.uint8), [0, 1, 2], [0.5], [0.5], ["a", "b", "c"])
    part = resident.subset(torch.tensor([2, 0]))
    assert part.files == ["c", "a"] and part.labels.tolist() == [2, 0] and len(part) == 2


def test_of_classes_keeps_the_named_classes_relabelled_in_their_order_and_cifar10_refuses_unknown_names():
    from vision.data import cifar10

    images = torch.arange(6, dtype=torch.uint8).view(6, 1, 1, 1).expand(6, 3, 2, 2).contiguous()
    kept = ResidentImages(images, [0, 1, 2, 0, 1, 2], [0.0] * 3, [1.0] * 3).of_classes([2, 0])
    assert kept.labels.tolist() == [1, 0, 1, 0]  # classes 0 and 2 of items 0, 2, 3, 5: 2 -> 0, 0 -> 1
    assert kept.images[:, 0, 0, 0].tolist() == [0, 2, 3, 5]
    with pytest.raises(DataError, match="distinct CIFAR-10 classes.*'plane'"):
        cifar10(classes=["cat", "plane"])
    with pytest.raises(DataError, match="at least 2"):
        cifar10(classes=["cat"])
