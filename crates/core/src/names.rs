//! Closed sets by name: every enum a scenario, a flag or a report names (op kinds,
//! anomalies, faults, backends, metrics...) implements `Named`, so parsing, listing the
//! valid names in an error and printing go through one table per enum.

/// An enum whose variants have stable names, each written once.
pub trait Named: Copy + PartialEq + 'static {
    /// Every variant, in the order listings show them.
    const ALL: &'static [Self];

    /// The stable name used in scenarios, flags and reports.
    fn name(self) -> &'static str;

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }

    /// `a, b, c`: the valid names, for error messages.
    fn valid() -> String {
        Self::ALL.iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
    }
}

/// Declares a closed-set enum with its names in one place:
/// `named_enum! { pub enum Arrival { Constant = "constant", Poisson = "poisson" } }`
/// gives the enum (Copy, Eq, Ord, Hash, Debug) and its `Named` implementation.
#[macro_export]
macro_rules! named_enum {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $name { $($(#[$vm])* $var),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($s),+].len()] = [$($name::$var),+];

            /// The stable name used in scenarios, flags and reports.
            pub fn name(self) -> &'static str {
                match self { $($name::$var => $s),+ }
            }

            pub fn from_name(name: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|v| v.name() == name)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl $crate::Named for $name {
            const ALL: &'static [$name] = &$name::ALL;
            fn name(self) -> &'static str {
                $name::name(self)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::Named;

    named_enum! {
        /// A test set.
        enum Colour { Red = "red", DeepBlue = "deep-blue" }
    }

    #[test]
    fn names_round_trip_and_list() {
        for c in Colour::ALL {
            assert_eq!(<Colour as Named>::parse(c.name()), Some(c));
        }
        assert_eq!(Colour::from_name("green"), None);
        assert_eq!(<Colour as Named>::valid(), "red, deep-blue");
        assert_eq!(Colour::DeepBlue.name(), "deep-blue");
    }
}
