//! Opening objects against a store of the test's own: an in-memory store
//! that counts its requests and how many are in flight at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::Pinned;
use crate::header::Rules;
use crate::store::{Budget, Object, ObjectUrl};

/// [`InMemory`], each GET answered once another is in flight or after a
/// few thousand turns of the runtime (so that GETs sent together overlap),
/// counted.
#[derive(Debug, Default)]
pub(super) struct Counting {
    pub(super) inner: InMemory,
    now: AtomicUsize,
    /// The most GETs (and HEADs) in flight at once.
    pub(super) most: AtomicUsize,
    pub(super) gets: AtomicUsize,
    pub(super) heads: AtomicUsize,
    /// The length of each ranged GET, in the order sent.
    pub(super) ranges: std::sync::Mutex<Vec<u64>>,
}

impl std::fmt::Display for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counting")
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let counter = if options.head {
            &self.heads
        } else {
            &self.gets
        };
        counter.fetch_add(1, Ordering::SeqCst);
        if let Some(object_store::GetRange::Bounded(r)) = &options.range {
            self.ranges.lock().unwrap().push(r.end - r.start);
        }
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        // Waits a while (up to a quarter second, not a count of yields: on a busy
        // machine those pass before the next request is sent) for another
        // GET to be sent beside this one.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(250);
        while self.now.load(Ordering::SeqCst) <= 1 && std::time::Instant::now() < until {
            tokio::task::yield_now().await;
        }
        let got = self.inner.get_opts(location, options).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        got
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// The object `key` of `store`, as `s3://b/KEY` would name it.
pub(super) fn object(store: &Arc<Counting>, key: &str) -> Object {
    let text = format!("s3://b/{key}");
    Object {
        url: text.clone(),
        at: ObjectUrl::parse(&text).unwrap(),
        store: store.clone(),
        multipart: None,
        path: ObjectPath::from(key),
        uploads: None,
    }
}

/// A safetensors file of one U8 tensor `name` of `len` bytes.
pub(super) fn safetensors(name: &str, len: usize) -> Vec<u8> {
    let mut header =
        format!(r#"{{"{name}":{{"dtype":"U8","shape":[{len}],"data_offsets":[0,{len}]}}}}"#);
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend((0..len).map(|i| i as u8));
    bytes
}

/// The index object `m/model.safetensors.index.json` of a weight map's
/// entries (`"name":"file"`) and the shards' total tensor bytes.
async fn put_index(store: &Counting, map: &[String], total: usize) {
    let index = format!(
        r#"{{"metadata":{{"total_size":{total}}},"weight_map":{{{}}}}}"#,
        map.join(",")
    );
    let path = ObjectPath::from("m/model.safetensors.index.json");
    store
        .inner
        .put(&path, index.into_bytes().into())
        .await
        .unwrap();
}

/// A sharded checkpoint of `shards` objects `m/sK.safetensors` (tensor
/// `tK`) and its index `m/model.safetensors.index.json`.
async fn checkpoint(store: &Arc<Counting>, shards: usize) {
    let mut map = Vec::new();
    for k in 0..shards {
        let file = safetensors(&format!("t{k}"), 4 + k);
        let path = ObjectPath::from(format!("m/s{k}.safetensors"));
        store.inner.put(&path, file.into()).await.unwrap();
        map.push(format!(r#""t{k}":"s{k}.safetensors""#));
    }
    let total: usize = (0..shards).map(|k| 4 + k).sum();
    put_index(store, &map, total).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_headers_are_read_several_at_once_by_one_get_each_in_the_index_order() {
    let store = Arc::new(Counting::default());
    checkpoint(&store, 100).await;
    let index = object(&store, "m/model.safetensors.index.json");
    let index = Pinned::head(index).await.unwrap();
    let (heads, gets) = (
        store.heads.load(Ordering::SeqCst),
        store.gets.load(Ordering::SeqCst),
    );
    let (parsed, pinned, files) = index.shards(Rules::SOURCE).await.unwrap();
    // One GET a shard (its length and ETag come with it), and the index's.
    assert_eq!(store.heads.load(Ordering::SeqCst) - heads, 0);
    assert_eq!(store.gets.load(Ordering::SeqCst) - gets, 100 + 1);
    let most = store.most.load(Ordering::SeqCst);
    assert!(most > 1, "one GET at a time");
    assert!(most <= super::HEADERS_IN_FLIGHT + 1, "{most} GETs at once");
    // In the index's order, each pinned to its own length and ETag.
    let want: Vec<String> = parsed
        .shard_names()
        .unwrap()
        .iter()
        .map(|n| format!("s3://b/m/{n}"))
        .collect();
    let got: Vec<String> = files.iter().map(|(l, _)| l.to_string()).collect();
    assert_eq!(got, want);
    for ((_, header), p) in files.iter().zip(&pinned) {
        let name = &header.tensors[0].meta.name;
        let k: u64 = name[1..].parse().unwrap();
        assert_eq!(p.size, safetensors(name, 4 + k as usize).len() as u64);
        assert!(p.etag.is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_reads_going_forward_are_coalesced_with_several_windows_in_flight() {
    use super::windows::{Windows, AHEAD, WINDOW, WINDOWS};
    let store = Arc::new(Counting::default());
    let len = 10 * WINDOW as usize + 12345;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let path = ObjectPath::from("big.bin");
    store.inner.put(&path, data.clone().into()).await.unwrap();
    let object = Arc::new(Pinned::head(object(&store, "big.bin")).await.unwrap());
    let windows = Windows::new(Budget::new(1 << 30));
    let gets = store.gets.load(Ordering::SeqCst);
    let piece = 100 << 10;
    for start in (0..len).step_by(piece) {
        let end = (start + piece).min(len);
        let got = windows.read(0, &object, start as u64, end as u64).await;
        assert!(got.unwrap() == data[start..end], "bytes {start}..{end}");
        let (held, coming) = windows.counts();
        assert!(
            held <= WINDOWS && coming <= AHEAD,
            "{held} held, {coming} coming"
        );
    }
    let gets = store.gets.load(Ordering::SeqCst) - gets;
    // A window a GET (and a short one where a read straddles two), not a
    // GET a read (107 reads).
    assert!(gets <= 2 * 11 + 1, "{gets} GETs");
    let most = store.most.load(Ordering::SeqCst);
    assert!(most > 1, "one GET at a time");
    assert!(most <= AHEAD + 1, "{most} GETs at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_of_two_inputs_stay_within_their_shared_budget() {
    use super::windows::{Windows, WINDOW};
    let store = Arc::new(Counting::default());
    let len = 6 * WINDOW as usize + 999;
    let data: Vec<u8> = (0..len).map(|i| (i % 241) as u8).collect();
    let path = ObjectPath::from("big.bin");
    store.inner.put(&path, data.clone().into()).await.unwrap();
    let object = Arc::new(Pinned::head(object(&store, "big.bin")).await.unwrap());
    // Two windows and a half: one read's window and one read ahead at most.
    let budget = Budget::new(5 * WINDOW / 2);
    let (a, b) = (Windows::new(budget.clone()), Windows::new(budget.clone()));
    let piece = 300 << 10;
    for start in (0..len).step_by(piece) {
        let end = (start + piece).min(len);
        // Two inputs read side by side, each forward: each takes the
        // other's windows back when it needs room.
        for windows in [&a, &b] {
            let got = windows.read(0, &object, start as u64, end as u64).await;
            assert!(got.unwrap() == data[start..end], "bytes {start}..{end}");
            let bytes = a.bytes() + b.bytes();
            assert!(bytes <= budget.total(), "{bytes} bytes in windows");
        }
    }
    assert!(budget.peak() <= budget.total());
    assert!(budget.peak() > WINDOW, "never read ahead");
}

/// A safetensors file of U8 tensors `names`, `len` bytes each, laid in
/// this order, each filled with its number among them (plus `first`).
fn many(names: &[String], len: usize, first: usize) -> Vec<u8> {
    let entries: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (a, b) = (i * len, (i + 1) * len);
            format!(r#""{n}":{{"dtype":"U8","shape":[{len}],"data_offsets":[{a},{b}]}}"#)
        })
        .collect();
    let mut header = format!("{{{}}}", entries.join(","));
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    for i in 0..names.len() {
        bytes.extend(std::iter::repeat_n((first + i) as u8, len));
    }
    bytes
}

/// A checkpoint of `shards` objects of `per` tensors `t0`, `t1`, ... (in
/// that order across the objects) of `len` bytes each, opened from its
/// index with windows leased from `budget`.
async fn many_tensors(
    store: &Arc<Counting>,
    shards: usize,
    per: usize,
    len: usize,
    budget: Arc<Budget>,
) -> super::ObjectSource {
    let mut map = Vec::new();
    for s in 0..shards {
        let names: Vec<String> = (s * per..(s + 1) * per).map(|k| format!("t{k}")).collect();
        let path = ObjectPath::from(format!("m/s{s}.safetensors"));
        let file = many(&names, len, s * per);
        store.inner.put(&path, file.into()).await.unwrap();
        map.extend(names.iter().map(|n| format!(r#""{n}":"s{s}.safetensors""#)));
    }
    let total = shards * per * len;
    put_index(store, &map, total).await;
    let index = object(store, "m/model.safetensors.index.json");
    let mut src = super::ObjectSource::open_index(Pinned::head(index).await.unwrap())
        .await
        .unwrap();
    src.windows = super::windows::Windows::new(budget);
    src
}

/// Reads tensors `order` of `src` as the copy does, told the order first;
/// checks each one's bytes, and after each the bytes leased.
async fn read_in_order(src: &mut super::ObjectSource, order: &[usize], budget: &Budget) {
    use crate::source::Source;
    use tokio::io::AsyncReadExt;
    src.will_read(order);
    for &k in order {
        let name = src.tensors()[k].name.clone();
        let number: usize = name[1..].parse().unwrap();
        let len = src.tensors()[k].byte_len().unwrap() as usize;
        let mut data = src.open(k).await.unwrap();
        let mut got = Vec::new();
        data.reader.read_to_end(&mut got).await.unwrap();
        assert!(got == vec![number as u8; len], "tensor {name}");
        let leased = budget.in_use();
        assert!(leased <= budget.total(), "{leased} bytes leased");
    }
}

/// The tensors of `src`, in the order the output writes them: by name
/// (`t0`, `t1`, `t10`, `t100`, ...), far from the objects' order.
fn name_order(src: &super::ObjectSource) -> Vec<usize> {
    use crate::source::Source;
    let mut order: Vec<usize> = (0..src.tensors().len()).collect();
    order.sort_by(|&a, &b| src.tensors()[a].name.cmp(&src.tensors()[b].name));
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_tensors_in_name_order_are_read_by_few_large_gets_several_at_once() {
    use super::windows::WINDOW;
    let store = Arc::new(Counting::default());
    // 3 objects of 1,000 tensors of 8 KiB: 24 MiB, read in name order.
    let (shards, per, len) = (3, 1000, 8 << 10);
    let budget = Budget::new(1 << 30);
    let mut src = many_tensors(&store, shards, per, len, budget.clone()).await;
    let order = name_order(&src);
    let gets = store.gets.load(Ordering::SeqCst);
    let before = store.ranges.lock().unwrap().len();
    read_in_order(&mut src, &order, &budget).await;
    let ranges = store.ranges.lock().unwrap()[before..].to_vec();
    let gets = store.gets.load(Ordering::SeqCst) - gets;
    assert_eq!(gets, ranges.len());
    // Each object's ~8 MiB of tensors (and its header's few bytes): GETs of
    // whole windows, two more an object at most for the batches' edges, not
    // 3,000 of 8 KiB (one per tensor).
    let total = (shards * per * len) as u64;
    let most_gets = total.div_ceil(WINDOW) + 2 * shards as u64;
    assert!(gets as u64 <= most_gets, "{gets} GETs: {ranges:?}");
    assert!(ranges.iter().all(|&r| r <= WINDOW), "{ranges:?}");
    let fetched = ranges.iter().sum::<u64>();
    assert!(fetched <= total + total / 8, "{ranges:?}");
    // Several in flight: a batch's spans at once.
    let most = store.most.load(Ordering::SeqCst);
    assert!(most > 1, "one GET at a time");
    // Leased: at most what was fetched (windows held are a cache, given
    // back only when a lease waits, and this budget never makes one wait),
    // each window's bytes leased once.
    assert!(budget.peak() <= fetched, "{} leased", budget.peak());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expected_reads_stay_within_a_small_budget() {
    use crate::store::MIN_BUDGET;
    let store = Arc::new(Counting::default());
    // 4 objects of 6 MiB, read in name order through the smallest budget.
    let (shards, per, len) = (4, 768, 8 << 10);
    let budget = Budget::new(MIN_BUDGET);
    let mut src = many_tensors(&store, shards, per, len, budget.clone()).await;
    let order = name_order(&src);
    let before = store.ranges.lock().unwrap().len();
    read_in_order(&mut src, &order, &budget).await;
    assert!(budget.peak() <= budget.total(), "{} leased", budget.peak());
    // Windows dropped for room may be asked again: still a few GETs per
    // object, not one per tensor (3,072).
    let gets = store.ranges.lock().unwrap().len() - before;
    assert!(gets <= 8 * shards, "{gets} GETs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_batch_is_sent_for_at_the_first_read_of_this_one() {
    use super::windows::BATCH;
    use crate::source::Source;
    use tokio::io::AsyncReadExt;
    let store = Arc::new(Counting::default());
    // One object of 4,096 tensors of 8 KiB (32 MiB: four batches), read in
    // its order.
    let (per, len) = (4096, 8 << 10);
    let budget = Budget::new(1 << 30);
    let mut src = many_tensors(&store, 1, per, len, budget.clone()).await;
    let order: Vec<usize> = (0..per).collect();
    let before = store.ranges.lock().unwrap().len();
    src.will_read(&order);
    // The first read sends its batch; the second, its first read once here,
    // the next one: two batches on their way before a tenth of one is read.
    for &k in &order[..2] {
        let mut data = src.open(k).await.unwrap();
        data.reader.read_to_end(&mut Vec::new()).await.unwrap();
    }
    let sent = || store.ranges.lock().unwrap()[before..].iter().sum::<u64>();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sent() < 2 * BATCH && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(sent(), 2 * BATCH, "{:?}", store.ranges.lock().unwrap());
}

/// A piece of a body, counted live (in `live`, the most at once in
/// `most`) from when the body gives it until it is dropped.
struct CountedPiece {
    bytes: Vec<u8>,
    live: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for CountedPiece {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for CountedPiece {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_body_in_many_pieces_is_collected_whole_without_keeping_its_pieces() {
    use bytes::Bytes;
    use futures::StreamExt;
    let store = Arc::new(Counting::default());
    let data: Vec<u8> = (0..64 << 10).map(|i| (i % 251) as u8).collect();
    let path = ObjectPath::from("pieces.bin");
    store.inner.put(&path, data.clone().into()).await.unwrap();
    let pinned = Pinned::head(object(&store, "pieces.bin")).await.unwrap();
    let mut got = store.inner.get(&path).await.unwrap();
    // The client's pieces: slices of its read buffers, 1 KiB each here.
    let (live, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let pieces: Vec<Vec<u8>> = data.chunks(1 << 10).map(<[u8]>::to_vec).collect();
    let counted = {
        let (live, most) = (Arc::clone(&live), Arc::clone(&most));
        futures::stream::iter(pieces).map(move |bytes| {
            most.fetch_max(live.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            let live = Arc::clone(&live);
            Ok(Bytes::from_owner(CountedPiece { bytes, live }))
        })
    };
    got.payload = object_store::GetResultPayload::Stream(counted.boxed());
    let whole = pinned.collect_exact(got, 0, data.len() as u64).await;
    assert!(whole.unwrap() == data, "the bytes collected differ");
    // Each piece copied and dropped as the next comes (the last kept while
    // the body's end is awaited), not all 64 held until the end.
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} pieces held at once");
    assert_eq!(live.load(Ordering::SeqCst), 0);
}
