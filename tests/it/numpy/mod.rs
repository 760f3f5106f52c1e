//! NumPy sources: every `.npy`/`.npz` case numpy writes, converted and
//! compared with numpy's own reading, and hostile archives refused.

mod hostile;
mod sources;
