"""Errors the hub raises for bad names, bad weights, bad recipes and bad user data.

Each message names what is wrong and what was expected, so a user can fix the input without
reading a stack trace from deep inside torch.
"""


class HubError(Exception):
    """Base class of every error the hub raises on purpose."""


class UnknownModelError(HubError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class RegistryError(HubError):
    """A name registered twice, or a malformed name."""


class WeightsError(HubError):
    """A weight file that fails its sha256, has wrong keys, or cannot be fetched."""


class OfflineError(WeightsError):
    """A download was needed while HUB_OFFLINE=1."""


class DownloadError(WeightsError):
    """A download that failed: no network, a server error, or a file cut short."""


class RecipeError(HubError):
    """A recipe with an unknown key, a wrong type or an unsafe construct."""


class DataError(HubError):
    """User data that does not match what the model or dataset expects."""


class DatasetUnavailable(DataError):
    """A dataset with no local copy (``HUB_DATA_DIR``, the cache) that cannot be downloaded either: offline, no
    network, or no public download. ``dataset`` is its name, so a test suite can skip naming it."""

    def __init__(self, dataset: str, message: str):
        super().__init__(message)
        self.dataset = dataset


class TrainingError(HubError):
    """A run that cannot go on: NaN loss, a refused resume, an existing run folder."""
