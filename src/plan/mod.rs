//! The planner: pure, no I/O. From the sources' listings and the user's
//! options it computes every output file's layout and exact header bytes
//! before a single data byte is read.

pub(crate) mod layout;

use std::collections::HashMap;

use globset::{Glob, GlobSet, GlobSetBuilder};

pub use crate::cast::Cast;
use crate::header::encode::encode_entries;
use crate::header::names::{lay_out, NameProblem};
use crate::header::{EncodedHeader, Metadata, Order, TensorEntry};
use crate::source::{Access, Listed, Listing};
use crate::{Dtype, Error, ErrorKind, HeaderError, Result};
pub use id::plan_id;

mod id;
mod rename;
mod ties;

use rename::Renamer;

crate::setters::options! {
    /// What to take from the inputs and how to lay it out.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PlanOptions {
        /// Keep only tensors whose (input) name matches one of these globs; all when empty.
        pub include: Vec<String> = Vec::new(),
        /// Drop tensors whose (input) name matches one of these globs.
        pub exclude: Vec<String> = Vec::new(),
        /// Exact renames `(from, to)` of input names, applied after filtering;
        /// each must match a tensor. A name given here is final: the prefix
        /// stripping and regex renames below skip it (`prefix` still applies).
        pub renames: Vec<(String, String)> = Vec::new(),
        /// Removed from the start of every selected name that has it
        /// (`--strip-prefix`), after the exact renames; must match a tensor.
        pub strip_prefix: Option<String> = None,
        /// Regex renames `(pattern, replacement)` (`--rename-regex`), after the
        /// prefix stripping, each in turn over the name the previous one left;
        /// every match is replaced (`$1`, `${name}` refer to groups); each must
        /// match a tensor. All renames, in order: an exact `renames` entry
        /// gives the final name; other names lose `strip_prefix`, then pass
        /// through each regex; `prefix` comes last.
        pub rename_regex: Vec<(String, String)> = Vec::new(),
        /// Prepended to every output name, after renames.
        pub prefix: Option<String> = None,
        /// Accept a plan with no tensor; otherwise it is
        /// [`ErrorKind::NothingSelected`], naming the filters.
        pub allow_empty: bool = false,
        /// Metadata entries that override the inputs' (`--metadata K=V`).
        pub metadata: Vec<(String, String)> = Vec::new(),
        /// Canonical (the reference's bytes) or the inputs' order.
        pub order: Order = Order::Canonical,
        /// Split into shards of at most this many tensor bytes.
        pub max_shard_size: Option<u64> = None,
        /// Casts by dtype (`--cast F32=BF16`); each pair must be one [`Cast::new`] accepts.
        pub casts: Vec<(Dtype, Dtype)> = Vec::new(),
        /// Cast every floating tensor (F64, F32, F16, BF16) to this dtype (`--cast-all`);
        /// `casts` take precedence.
        pub cast_all: Option<Dtype> = None,
        /// Refuse to plan unless the plan's id is this one (`--expect-plan`):
        /// the workers of a fan-out then all write one version of the inputs.
        /// See [`plan_id`].
        pub expect_plan: Option<String> = None,
    }
}

/// Which source tensor an output tensor comes from, and how it is cast.
///
/// A plan holds one a tensor: 12 bytes, its indices kept as `u32` (a
/// header of at most 100 MB lists fewer than 2^32 tensors, and a plan
/// refuses more), where two `usize` made 24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorRef {
    source: u32,
    index: u32,
    cast: Option<Cast>,
}

impl TensorRef {
    /// Index of the source in the input list.
    pub fn source(&self) -> usize {
        self.source as usize
    }

    /// Index of the tensor in that source's listing.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The cast applied on the way, if any.
    pub fn cast(&self) -> Option<Cast> {
        self.cast
    }
}

/// One output file: its header, and where each of its tensors comes from.
#[derive(Debug, Clone)]
pub struct ShardPlan {
    /// The laid-out header and its bytes.
    pub header: EncodedHeader,
    /// The source of each tensor, in the header's offset order.
    pub refs: Vec<TensorRef>,
}

impl ShardPlan {
    /// The file's total length.
    pub fn file_len(&self) -> u64 {
        self.header.header.file_len()
    }

    /// Its tensors from the `from`th, in offset order, each with where it
    /// comes from: the header's entries and the refs are two parallel
    /// lists (one entry each, not three copies), joined here.
    pub(crate) fn planned(&self, from: usize) -> impl Iterator<Item = Planned<'_>> {
        let entries = &self.header.header.tensors[from..];
        self.refs[from..]
            .iter()
            .zip(entries)
            .map(|(r, entry)| Planned {
                source: r.source as usize,
                index: r.index as usize,
                cast: r.cast,
                entry,
            })
    }
}

/// An output tensor and where it comes from ([`ShardPlan::planned`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned<'a> {
    /// Index of the source in the input list.
    pub(crate) source: usize,
    /// Index of the tensor in that source's listing.
    pub(crate) index: usize,
    /// The cast applied on the way, if any.
    pub(crate) cast: Option<Cast>,
    /// Its entry in the shard's header: output name, dtype, shape, offsets.
    pub(crate) entry: &'a TensorEntry,
}

/// A cast that a conversion applies.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CastNote {
    /// The output tensor.
    pub tensor: String,
    /// Its dtype in the input.
    #[serde(serialize_with = "as_text")]
    pub from: Dtype,
    /// Its dtype in the output.
    #[serde(serialize_with = "as_text")]
    pub to: Dtype,
}

/// A dtype in JSON: its name (`"F16"`).
fn as_text<S: serde::Serializer>(dtype: &Dtype, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(dtype)
}

/// The whole job: one shard, or several.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Output files in order.
    pub shards: Vec<ShardPlan>,
}

impl Plan {
    /// Tensor bytes over all shards (headers excluded): an index's `total_size`.
    pub fn data_len(&self) -> u64 {
        self.shards.iter().map(|s| s.header.header.data_len()).sum()
    }

    /// Bytes of every output file, headers included.
    pub fn file_len(&self) -> u64 {
        self.shards.iter().map(ShardPlan::file_len).sum()
    }

    /// Number of tensors over all shards.
    pub fn tensor_count(&self) -> usize {
        self.shards.iter().map(|s| s.refs.len()).sum()
    }

    /// The casts the plan applies, tensor by tensor, for reports.
    pub fn cast_notes(&self) -> Vec<CastNote> {
        self.shards
            .iter()
            .flat_map(|s| s.planned(0))
            .filter_map(|p| {
                p.cast.map(|c| CastNote {
                    tensor: p.entry.meta.name.clone(),
                    from: c.from(),
                    to: c.to(),
                })
            })
            .collect()
    }

    /// A source that reads only forward must be asked for its tensors in
    /// its own order. (Inputs whose format needs random access are spooled
    /// to disk when opened; a streamed .npy holds one tensor, so this
    /// rarely bites.)
    fn check_access<L: Listed>(&self, listings: &[L]) -> Result<()> {
        let mut last: Vec<Option<usize>> = vec![None; listings.len()];
        for p in self.shards.iter().flat_map(|s| s.planned(0)) {
            let l = &listings[p.source];
            if let Access::Sequential = l.access() {
                if last[p.source].is_some_and(|l| l >= p.index) {
                    let msg = "this input can only be read forward, and the output order differs from its order; use --order input";
                    let e = Error::new(ErrorKind::ReadOnce(msg));
                    return Err(e.with_input(&l.listing().input));
                }
                last[p.source] = Some(p.index);
            }
        }
        Ok(())
    }

    /// Refuses a plan whose tensors `listings` do not all have, of its
    /// shape and dtype (or its cast's): a plan made from other inputs of
    /// the same shape would write their bytes under its names; and one
    /// that reads a forward-only input out of its order.
    pub(crate) fn check_made_from<L: Listed>(&self, listings: &[L]) -> Result<()> {
        for p in self.shards.iter().flat_map(|s| s.planned(0)) {
            let meta = listings
                .get(p.source)
                .and_then(|l| l.listing().tensors.get(p.index));
            let t = &p.entry.meta;
            let fits = meta.is_some_and(|m| {
                let dtype = p.cast.map_or(m.dtype, |c| c.to());
                p.cast.is_none_or(|c| c.from() == m.dtype) && dtype == t.dtype && m.shape == t.shape
            });
            if !fits {
                let e = usage("the plan was not made from these sources".into());
                return Err(e.with_tensor(t.name.clone()));
            }
        }
        // A plan made elsewhere (from a detached listing, which reads in
        // any order) may ask a forward-only input for another order.
        self.check_access(listings)
    }
}

/// Plans the conversion of `listings` under `options`. An input that can
/// be read only forward ([`Listed::access`]) must be read in its own order:
/// a plan that asks for its tensors in another is refused.
///
/// ```
/// use safetensors_stream::{Dtype, header::TensorMeta, plan::{plan, PlanOptions}, source::Listing};
///
/// // Any `Listed`: a detached `Listing`, or the opened sources themselves.
///
/// let input = Listing {
///     input: "a.safetensors".into(),
///     tensors: vec![TensorMeta::new("x", Dtype::U8, [3]), TensorMeta::new("y", Dtype::F64, [1])],
///     metadata: None,
/// };
/// let p = plan(&[input], &PlanOptions::default())?;
/// let names: Vec<_> = p.shards[0].header.header().tensors.iter().map(|t| t.meta.name.as_str()).collect();
/// assert_eq!(names, ["y", "x"]); // F64 before U8, as the reference writes
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
pub fn plan<L: Listed>(listings: &[L], options: &PlanOptions) -> Result<Plan> {
    // The output's entries and their refs, as two parallel lists that are
    // sorted and split together: each entry is built once, in the place the
    // output header keeps it (a million-tensor plan held three copies).
    // What the planner reads of each input: its listing (its name,
    // tensors and metadata), as plain data.
    let lists: Vec<&Listing> = listings.iter().map(Listed::listing).collect();
    let (mut entries, mut refs) = select(&lists, options)?;
    let mut metadata = merge_metadata(&lists, &options.metadata);
    ties::dedupe(listings, &mut entries, &mut refs, &mut metadata);
    if entries.is_empty() && !options.allow_empty {
        return Err(ErrorKind::NothingSelected(nothing_selected(&lists, options)).into());
    }
    lay_out(&mut entries, options.order, &mut refs)
        .map_err(|p| name_error(p, &entries, &refs, &lists))?;
    let groups = split_shards(entries, refs, options.max_shard_size)?;
    let last = groups.len().saturating_sub(1);
    let mut shards = Vec::with_capacity(groups.len());
    for (k, (entries, refs)) in groups.into_iter().enumerate() {
        // The last shard takes the metadata, the others a copy: a 90 MB
        // `__metadata__` string is held once by the plan, not twice.
        let metadata = match k == last {
            true => metadata.take(),
            false => metadata.clone(),
        };
        let header = encode_entries(entries, metadata)?;
        shards.push(ShardPlan { header, refs });
    }
    let plan = Plan { shards };
    id::check_expected(listings, &plan, options.expect_plan.as_deref())?;
    plan.check_access(listings)?;
    Ok(plan)
}

/// Output entries (offsets not yet placed) and, in parallel, their sources.
type Selected = (Vec<TensorEntry>, Vec<TensorRef>);

fn globs(patterns: &[String], flag: &str) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let g = Glob::new(p).map_err(|e| usage(format!("{flag} {p:?}: {e}")))?;
        b.add(g);
    }
    b.build()
        .map(Some)
        .map_err(|e| usage(format!("{flag}: {e}")))
}

/// Why nothing was selected: the filters that matched nothing, or empty inputs.
fn nothing_selected(listings: &[&Listing], o: &PlanOptions) -> String {
    if listings.iter().all(|l| l.tensors.is_empty()) {
        return match listings.len() {
            1 => "the input holds no tensors".to_string(),
            n => format!("none of the {n} inputs holds a tensor"),
        };
    }
    let flags: Vec<String> = o
        .include
        .iter()
        .map(|g| format!("--include {g:?}"))
        .chain(o.exclude.iter().map(|g| format!("--exclude {g:?}")))
        .collect();
    // A glob matches a whole name: `enc` selects a tensor named `enc` only.
    let partial: Vec<String> = o
        .include
        .iter()
        .filter(|g| !g.contains(['*', '?', '[']))
        .map(|g| format!("--include {:?}", format!("*{g}*")))
        .collect();
    let hint = match partial.is_empty() {
        true => String::new(),
        false => format!(
            " (a glob matches whole names: {} selects the names containing it)",
            partial.join(" ")
        ),
    };
    let names: Vec<String> = listings
        .iter()
        .flat_map(|l| &l.tensors)
        .map(|t| format!("{:?}", t.name))
        .take(3)
        .collect();
    let total: usize = listings.iter().map(|l| l.tensors.len()).sum();
    let more = if total > names.len() { ", ..." } else { "" };
    format!(
        "the filters {} select no tensor of the inputs{hint}; their names are {}{more} ({})",
        flags.join(" "),
        names.join(", "),
        crate::units::Counted(total, "tensor")
    )
}

fn usage(msg: String) -> Error {
    Error::new(ErrorKind::Usage(msg))
}

/// Filters, renames and prefixes, in the inputs' order.
fn select(listings: &[&Listing], o: &PlanOptions) -> Result<Selected> {
    let include = globs(&o.include, "--include")?;
    let exclude = globs(&o.exclude, "--exclude")?;
    let renames: HashMap<&str, &str> = o
        .renames
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let mut used = vec![false; o.renames.len()];
    let mut patterns = Renamer::new(o.strip_prefix.as_deref(), &o.rename_regex)?;
    let casts = cast_rules(o)?;
    // Room for every tensor: what filters leave out is never touched.
    let count = listings.iter().map(|l| l.tensors.len()).sum();
    let mut entries = Vec::with_capacity(count);
    let mut refs = Vec::with_capacity(count);
    for (source, listing) in listings.iter().enumerate() {
        for (index, meta) in listing.tensors.iter().enumerate() {
            let keep = include.as_ref().is_none_or(|g| g.is_match(&meta.name))
                && !exclude.as_ref().is_some_and(|g| g.is_match(&meta.name));
            if !keep {
                continue;
            }
            let mut meta = meta.clone();
            if let Some(to) = renames.get(meta.name.as_str()) {
                if let Some(i) = o.renames.iter().position(|(f, _)| *f == meta.name) {
                    used[i] = true;
                }
                meta.name = to.to_string();
            } else if let Some(renamed) = patterns.apply(&meta.name) {
                meta.name = renamed;
            }
            if let Some(p) = &o.prefix {
                meta.name.insert_str(0, p);
            }
            let cast = casts
                .get(&meta.dtype)
                .copied()
                .or_else(|| cast_all(o.cast_all, meta.dtype));
            if let Some(c) = cast {
                meta.dtype = c.to();
            }
            entries.push(TensorEntry {
                meta,
                begin: 0,
                end: 0,
            });
            refs.push(TensorRef {
                source: as_u32(source)?,
                index: as_u32(index)?,
                cast,
            });
        }
    }
    if entries.is_empty() && !o.allow_empty {
        // Said as NothingSelected, naming the filters: the root cause.
        return Ok((entries, refs));
    }
    if let Some(i) = used.iter().position(|u| !u) {
        let (from, to) = &o.renames[i];
        return Err(usage(format!(
            "--rename {from}={to}: no selected tensor is named {from:?}"
        )));
    }
    patterns.check_all_used()?;
    Ok((entries, refs))
}

/// An index of a plan's reference; the lists it indexes are far shorter.
fn as_u32(i: usize) -> Result<u32> {
    u32::try_from(i).map_err(|_| usage(format!("more than {} tensors or inputs", u32::MAX)))
}

/// The explicit casts, each checked.
fn cast_rules(o: &PlanOptions) -> Result<HashMap<Dtype, Cast>> {
    let mut rules = HashMap::new();
    for &(from, to) in &o.casts {
        let c = Cast::new(from, to).map_err(|e| usage(format!("--cast {from}={to}: {e}")))?;
        if rules.insert(from, c).is_some() {
            return Err(usage(format!("--cast {from}=...: given twice")));
        }
    }
    if let Some(to) = o.cast_all {
        if !matches!(to, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(usage(format!(
                "--cast-all {to}: only F64, F32, F16 or BF16"
            )));
        }
    }
    Ok(rules)
}

/// `--cast-all TO` touches floating tensors of another float kind only.
fn cast_all(to: Option<Dtype>, from: Dtype) -> Option<Cast> {
    Cast::new(from, to?).ok().filter(|_| from.is_float())
}

/// A name the header cannot take, said with the inputs it comes from.
fn name_error(
    problem: NameProblem,
    entries: &[TensorEntry],
    refs: &[TensorRef],
    listings: &[&Listing],
) -> Error {
    let input = |at: usize| listings[refs[at].source as usize].input.as_str();
    match problem {
        NameProblem::Reserved(at) => Error::new(HeaderError::ReservedName)
            .with_input(input(at))
            .with_tensor(entries[at].meta.name.clone()),
        NameProblem::Repeat(first, again) => HeaderError::DuplicateTensor {
            name: entries[again].meta.name.clone(),
            inputs: Some((input(first).to_string(), input(again).to_string())),
        }
        .into(),
    }
}

/// Inputs' metadata in input order (later wins), then the overrides.
/// `None` when no input has metadata and there are no overrides, so that a
/// file without `__metadata__` round-trips to identical bytes.
fn merge_metadata(listings: &[&Listing], overrides: &[(String, String)]) -> Option<Metadata> {
    let mut merged: Option<Metadata> = None;
    for md in listings.iter().filter_map(|l| l.metadata.as_ref()) {
        merged
            .get_or_insert_with(Metadata::new)
            .extend(md.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for (k, v) in overrides {
        merged
            .get_or_insert_with(Metadata::new)
            .insert(k.clone(), v.clone());
    }
    merged
}

/// Greedy, as huggingface_hub: close a shard when the next tensor would take
/// it past the limit (equal is allowed); a tensor over the limit goes alone.
fn split_shards(
    mut entries: Vec<TensorEntry>,
    mut refs: Vec<TensorRef>,
    max: Option<u64>,
) -> Result<Vec<Selected>> {
    let Some(max) = max else {
        return Ok(vec![(entries, refs)]);
    };
    if max == 0 {
        return Err(usage("--max-shard-size must be more than 0 bytes".into()));
    }
    // Where each shard after the first starts.
    let mut starts = Vec::new();
    let (mut current, mut size) = (0usize, 0u64);
    for (k, e) in entries.iter().enumerate() {
        let len = e.meta.byte_len()?;
        if k > current && size.saturating_add(len) > max {
            starts.push(k);
            current = k;
            size = 0;
        }
        size = size.saturating_add(len);
    }
    // Split off from the end, so each tensor moves once.
    let mut shards = Vec::with_capacity(starts.len() + 1);
    for &k in starts.iter().rev() {
        shards.push((entries.split_off(k), refs.split_off(k)));
    }
    // The first shard's lists keep the whole run's room unless given back.
    entries.shrink_to_fit();
    refs.shrink_to_fit();
    shards.push((entries, refs));
    shards.reverse();
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::TensorMeta;
    use crate::source::Listing;
    use crate::Dtype;

    #[test]
    fn a_reference_takes_12_bytes() {
        // One a tensor: a million-tensor plan's second largest list.
        assert_eq!(std::mem::size_of::<TensorRef>(), 12);
    }

    fn listing(input: &str, names: &[(&str, Dtype, u64)]) -> Listing {
        Listing {
            input: input.into(),
            tensors: names
                .iter()
                .map(|(n, d, len)| TensorMeta::new(*n, *d, [*len]))
                .collect(),
            metadata: None,
        }
    }

    fn names(p: &Plan, shard: usize) -> Vec<String> {
        let h = p.shards[shard].header.header();
        h.tensors.iter().map(|t| t.meta.name.clone()).collect()
    }

    #[test]
    fn duplicate_across_inputs_names_both() {
        let a = listing("a.safetensors", &[("w", Dtype::U8, 1)]);
        let b = listing("b.safetensors", &[("w", Dtype::U8, 1)]);
        let e = plan(&[a, b], &PlanOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"tensor name "w" is given twice (in a.safetensors and b.safetensors)"#
        );
    }

    #[test]
    fn filter_rename_prefix() {
        let a = listing(
            "a",
            &[
                ("x.w", Dtype::U8, 1),
                ("x.b", Dtype::U8, 1),
                ("y", Dtype::U8, 1),
            ],
        );
        let o = PlanOptions {
            include: vec!["x.*".into()],
            exclude: vec!["*.b".into()],
            renames: vec![("x.w".into(), "w".into())],
            prefix: Some("m.".into()),
            ..Default::default()
        };
        let p = plan(&[a], &o).unwrap();
        assert_eq!(names(&p, 0), ["m.w"]);
    }

    #[test]
    fn unused_rename_is_an_error() {
        let a = listing("a", &[("x", Dtype::U8, 1)]);
        let o = PlanOptions {
            renames: vec![("nope".into(), "w".into())],
            ..Default::default()
        };
        assert!(matches!(
            plan(&[a], &o).unwrap_err().kind(),
            ErrorKind::Usage(_)
        ));
    }

    #[test]
    fn metadata_merge_order() {
        let mut a = listing("a", &[]);
        a.metadata = Some(Metadata::from([
            ("k".into(), "a".into()),
            ("x".into(), "1".into()),
        ]));
        let mut b = listing("b", &[]);
        b.metadata = Some(Metadata::from([("k".into(), "b".into())]));
        let o = PlanOptions {
            metadata: vec![("x".into(), "2".into())],
            allow_empty: true,
            ..Default::default()
        };
        let p = plan(&[a, b], &o).unwrap();
        let md = p.shards[0].header.header().metadata.clone().unwrap();
        assert_eq!(md["k"], "b");
        assert_eq!(md["x"], "2");
        let empty_ok = PlanOptions {
            allow_empty: true,
            ..Default::default()
        };
        let none = plan(&[listing("c", &[])], &empty_ok).unwrap();
        assert!(none.shards[0].header.header().metadata.is_none());
    }

    #[test]
    fn nothing_selected_names_the_filters_unless_allowed() {
        let a = listing("a", &[("x", Dtype::U8, 1)]);
        let o = PlanOptions {
            include: vec!["model.*".into()],
            renames: vec![("x".into(), "y".into())],
            ..Default::default()
        };
        let e = plan(std::slice::from_ref(&a), &o).unwrap_err();
        match e.kind() {
            ErrorKind::NothingSelected(why) => assert!(why.contains(r#"--include "model.*""#)),
            k => panic!("{k:?}"),
        }
        let empty = listing("e", &[]);
        let e = plan(std::slice::from_ref(&empty), &PlanOptions::default()).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::NothingSelected(_)));
        let allowed = PlanOptions {
            include: vec!["model.*".into()],
            allow_empty: true,
            ..Default::default()
        };
        assert_eq!(plan(&[a], &allowed).unwrap().tensor_count(), 0);
    }

    #[test]
    fn exact_rename_is_final_patterns_then_prefix() {
        let a = listing(
            "a",
            &[
                ("model.layers.0.w", Dtype::U8, 1),
                ("model.layers.1.w", Dtype::U8, 1),
                ("model.embed", Dtype::U8, 1),
            ],
        );
        let o = PlanOptions {
            renames: vec![("model.embed".into(), "wte".into())],
            strip_prefix: Some("model.".into()),
            rename_regex: vec![(r"^layers\.(\d+)\.".into(), "h.$1.".into())],
            prefix: Some("t.".into()),
            ..Default::default()
        };
        assert_eq!(
            names(&plan(&[a], &o).unwrap(), 0),
            ["t.h.0.w", "t.h.1.w", "t.wte"]
        );
    }

    #[test]
    fn greedy_shards() {
        // Canonical order is by dtype then name: all U8 here, so by name.
        let a = listing(
            "a",
            &[
                ("a", Dtype::U8, 4),
                ("b", Dtype::U8, 6),
                ("c", Dtype::U8, 11),
                ("d", Dtype::U8, 3),
                ("e", Dtype::U8, 7),
            ],
        );
        let o = PlanOptions {
            max_shard_size: Some(10),
            ..Default::default()
        };
        let p = plan(&[a], &o).unwrap();
        let sets: Vec<_> = (0..p.shards.len()).map(|i| names(&p, i)).collect();
        assert_eq!(sets, [vec!["a", "b"], vec!["c"], vec!["d", "e"]]);
        assert_eq!(p.data_len(), 31);
    }

    #[test]
    fn input_order_is_kept() {
        let a = listing("a", &[("z", Dtype::U8, 1), ("a", Dtype::F64, 1)]);
        let o = PlanOptions {
            order: Order::AsGiven,
            ..Default::default()
        };
        assert_eq!(names(&plan(&[a], &o).unwrap(), 0), ["z", "a"]);
    }

    /// A listing read only forward, as a piped .npy is.
    struct Forward(Listing);

    impl Listed for Forward {
        fn listing(&self) -> &Listing {
            &self.0
        }
        fn access(&self) -> Access {
            Access::Sequential
        }
    }

    #[test]
    fn a_forward_only_input_is_planned_in_its_own_order_only() {
        let piped = || {
            Forward(listing(
                "stdin",
                &[("z", Dtype::U8, 1), ("a", Dtype::U8, 1)],
            ))
        };
        let e = plan(&[piped()], &PlanOptions::default()).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::ReadOnce(_)), "{e}");
        assert_eq!(e.input(), Some("stdin"));
        let as_given = PlanOptions {
            order: Order::AsGiven,
            ..Default::default()
        };
        assert_eq!(names(&plan(&[piped()], &as_given).unwrap(), 0), ["z", "a"]);
        // Already in canonical order: nothing to refuse.
        let sorted = Forward(listing(
            "stdin",
            &[("a", Dtype::U8, 1), ("z", Dtype::U8, 1)],
        ));
        assert!(plan(&[sorted], &PlanOptions::default()).is_ok());
    }

    #[test]
    fn a_plan_made_elsewhere_is_refused_to_a_forward_only_input() {
        let listed = listing("stdin", &[("z", Dtype::U8, 1), ("a", Dtype::U8, 1)]);
        let p = plan(std::slice::from_ref(&listed), &PlanOptions::default()).unwrap();
        p.check_made_from(std::slice::from_ref(&listed)).unwrap();
        let e = p.check_made_from(&[Forward(listed)]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::ReadOnce(_)), "{e}");
        assert_eq!(e.input(), Some("stdin"));
    }
}
