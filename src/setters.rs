//! Builder-style setters for the options structs.
//!
//! The options are `#[non_exhaustive]`, so that adding one is not a breaking
//! change; callers outside the crate therefore cannot write a struct literal,
//! and start from `Default::default()` and chain a setter per field instead.

/// `pub fn field(mut self, value: Type) -> Self` for each listed field.
macro_rules! setters {
    ($ty:ident { $($field:ident : $fty:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](", stringify!($ty), "::", stringify!($field), ").")]
                #[must_use]
                pub fn $field(mut self, value: $fty) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

/// Declares an options struct (`#[non_exhaustive]`) and a setter per
/// field from one list: each field is named once, and none can lack its
/// setter. Where every field is written `pub name: Type = default`, the
/// defaults stand beside the fields and make a constant, `Type::DEFAULT`,
/// which `Default::default()` returns: options nested in options are then
/// one constant, not a call per struct at run time.
macro_rules! options {
    (
        $(#[$meta:meta])*
        pub struct $ty:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $fty:ty = $default:expr ),* $(,)?
        }
    ) => {
        $crate::setters::options! {
            $(#[$meta])*
            pub struct $ty {
                $( $(#[$fmeta])* pub $field: $fty ),*
            }
        }

        impl $ty {
            #[doc = concat!("The defaults, as a constant: what `", stringify!($ty), "::default()` returns.")]
            pub const DEFAULT: $ty = $ty { $( $field: $default ),* };
        }

        impl Default for $ty {
            fn default() -> Self {
                Self::DEFAULT
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $ty:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $fty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[non_exhaustive]
        pub struct $ty {
            $( $(#[$fmeta])* pub $field: $fty, )*
        }

        $crate::setters::setters!($ty { $($field: $fty),* });
    };
}

pub(crate) use {options, setters};
