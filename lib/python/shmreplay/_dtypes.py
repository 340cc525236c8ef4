"""The NumPy dtypes a field can hold and their shmreplay names (a Field's dtype text), for the modules that make
schemas from NumPy arrays or Gymnasium spaces (shmreplay.sb3, _env_steps, _pytree). bf16 has no NumPy dtype of its
own (ml_dtypes'), so it is not here."""
import numpy as np

# numpy dtype -> shmreplay dtype name
DTYPES = {np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8", np.dtype(np.uint16): "u16", np.dtype(np.int16): "i16",
          np.dtype(np.uint32): "u32", np.dtype(np.int32): "i32", np.dtype(np.uint64): "u64",
          np.dtype(np.int64): "i64", np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
          np.dtype(np.float64): "f64", np.dtype(np.bool_): "bool"}


def dtype_name(dtype, what, module="shmreplay"):
    """The shmreplay dtype name of a NumPy dtype; a TypeError naming ``what`` (and ``module``, the caller) if none."""
    try:
        return DTYPES[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"{module}: {what} has dtype {np.dtype(dtype)}, expected one of "
                        f"{', '.join(str(d) for d in DTYPES)}") from None
