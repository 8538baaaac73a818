/* The C runtime of an exported kiln program: loads and checks the weights,
 * runs the steps on a small pthread pool, checks what a caller passes through
 * the C API. kiln's exporter writes the program's tables and this file into
 * one C file and compiles it; it needs only libc, libm and libpthread.
 * Depends on the exported header (KILN_HEADER) and the generated tables. */
#define _POSIX_C_SOURCE 200809L
#include KILN_HEADER

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void (*kiln_kernel)(char *const *buffers, int64_t begin, int64_t end);

enum {
  BUFFER_INPUT = 0,     /* caller's input `index` */
  BUFFER_WEIGHT = 1,    /* weight `index` */
  BUFFER_WORKSPACE = 2, /* workspace + offset */
  BUFFER_OWNED = 3,     /* memory of its own, `bytes` long, per model */
  BUFFER_VIEW = 4,      /* buffer `index` + offset */
};

typedef struct {
  int32_t kind;
  int32_t index;
  int64_t offset; /* bytes */
  int64_t bytes;
} kiln_buffer_desc;

/* A STEP_SLOTS entry that stands for the step's B packed ahead. */
#define PACKED_B_SLOT (-2)

typedef struct {
  kiln_kernel kernel;
  /* A GEMM on a weight: packs the weight once, at create, over
     [0, pack_range) into packed_b_bytes that the kernel reads; or NULL. */
  kiln_kernel pack_b;
  int32_t first_slot; /* into STEP_SLOTS: the buffer of each argument */
  int32_t slot_count;
  int64_t parallel_range; /* the kernel runs [0, parallel_range) */
  int64_t pack_range;
  int64_t packed_b_bytes;
  int64_t alignment;   /* chunk boundaries are multiples of it */
  int64_t work;        /* elements touched, roughly */
  int32_t equal_units; /* units of equal work (a GEMM's tiles) */
} kiln_step_desc;

typedef struct {
  const char *name;
  int32_t dtype;
  int32_t rank;
  const int64_t *sizes;
  const int64_t *strides;
  int32_t buffer; /* outputs: the buffer that holds it */
} kiln_tensor_desc;

typedef struct {
  const char *name;
  int64_t bytes;
} kiln_weight_desc;

/* Ids an input holds that a kernel reads rows at (an embedding's): each
   element of the view (rank, sizes, strides, offset in elements) of input
   `input` must lie in [0, rows), or in [-rows, rows) where `from_end`
   (indexing, which counts negative ids from the end), or equal `ignored`
   where `has_ignored` (nll_loss's ignore_index). `report` is the error's
   wording, as torch's op words it (loop::IndexCheck::Report): 0 an
   embedding's, 1 indexing's, 2 gather's, 3 a loss target's; `dim` the
   dimension it names. */
typedef struct {
  int32_t input;
  int32_t dtype;
  int64_t rows;
  int32_t rank;
  const int64_t *sizes;
  const int64_t *strides;
  int64_t offset;
  int32_t from_end;
  int32_t report;
  int64_t dim;
  int32_t has_ignored;
  int64_t ignored;
} kiln_index_check;

/* KILN_TABLES */

/* ------------------------------------------------------------- errors */

static _Thread_local char last_error[1024];

static kiln_status fail(kiln_status status, const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  int used = snprintf(last_error, sizeof last_error, "%s: ", MODEL_NAME);
  if (used < 0 || (size_t)used >= sizeof last_error)
    used = 0;
  vsnprintf(last_error + used, sizeof last_error - (size_t)used, format,
            arguments);
  va_end(arguments);
  return status;
}

const char *KILN_API(last_error)(void) { return last_error; }

/* --------------------------------------------------------- thread pool */

/* Workers spin a little after each job (kernels of one run come back to
   back), then sleep on a condition variable. The caller works too. A job's
   chunks are split in one contiguous block a thread (thread t's about t/n
   of the way in); each thread takes its own block's chunks first, then the
   others' that are left, so that every kernel and every run gives a thread
   the rows its caches hold from the kernel before (the JIT's ThreadPool
   does the same). */
typedef struct {
  _Alignas(64) atomic_llong next; /* the block's next chunk */
  int64_t end;                    /* its end */
} kiln_block;

struct kiln_pool;
typedef struct {
  struct kiln_pool *pool;
  int index; /* the caller is thread 0 */
} kiln_worker;

typedef struct kiln_pool {
  int threads; /* the caller included */
  pthread_t *workers;
  kiln_worker *worker_args;
  kiln_block *blocks; /* one a thread */
  int takers;         /* threads that take chunks in the current job */
  int started;
  pthread_mutex_t mutex;
  pthread_cond_t wake;
  /* What idle workers poll, what busy ones take chunks from and what the
     caller polls sit on cache lines of their own: sharing one, every chunk
     taken would invalidate the line all spinning threads read. */
  _Alignas(64) atomic_ulong generation;
  atomic_int stop;
  /* the current job */
  kiln_kernel kernel;
  char *const *arguments;
  int64_t chunk_size, range, chunk_count;
  _Alignas(64) atomic_int pending; /* workers not yet done with the job */
  char padding[60];
} kiln_pool;

/* Runs the chunks thread `thread` takes: its block's, then the rest. */
static void run_chunks(kiln_pool *pool, int thread) {
  int takers = pool->takers;
  if (thread >= takers)
    return;
  for (int step = 0; step < takers; ++step) {
    kiln_block *block = &pool->blocks[(thread + step) % takers];
    for (;;) {
      int64_t chunk = atomic_fetch_add(&block->next, 1);
      if (chunk >= block->end)
        break;
      int64_t begin = chunk * pool->chunk_size;
      int64_t end = begin + pool->chunk_size;
      pool->kernel(pool->arguments, begin,
                   end < pool->range ? end : pool->range);
    }
  }
}

static void *worker_main(void *argument) {
  kiln_pool *pool = ((kiln_worker *)argument)->pool;
  int index = ((kiln_worker *)argument)->index;
  unsigned long seen = 0;
  for (;;) {
    unsigned long current = atomic_load(&pool->generation);
    for (int spin = 0; current == seen && spin < 20000; ++spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      current = atomic_load(&pool->generation);
    }
    if (current == seen) {
      pthread_mutex_lock(&pool->mutex);
      while ((current = atomic_load(&pool->generation)) == seen &&
             !atomic_load(&pool->stop))
        pthread_cond_wait(&pool->wake, &pool->mutex);
      pthread_mutex_unlock(&pool->mutex);
    }
    if (atomic_load(&pool->stop))
      return NULL;
    seen = current;
    run_chunks(pool, index);
    atomic_fetch_sub(&pool->pending, 1);
  }
}

static void pool_stop(kiln_pool *pool) {
  pthread_mutex_lock(&pool->mutex);
  atomic_store(&pool->stop, 1);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  for (int i = 0; i < pool->started; ++i)
    pthread_join(pool->workers[i], NULL);
  free(pool->workers);
  free(pool->worker_args);
  free(pool->blocks);
  pthread_mutex_destroy(&pool->mutex);
  pthread_cond_destroy(&pool->wake);
}

static void pool_init(kiln_pool *pool) {
  memset(pool, 0, sizeof *pool);
  pool->threads = 1;
  pthread_mutex_init(&pool->mutex, NULL);
  pthread_cond_init(&pool->wake, NULL);
}

/* Starts the workers of a pool_init'ed pool. */
static kiln_status pool_start(kiln_pool *pool, int threads) {
  if (threads <= 1)
    return KILN_OK;
  pool->workers = (pthread_t *)calloc((size_t)threads - 1, sizeof(pthread_t));
  pool->worker_args =
      (kiln_worker *)calloc((size_t)threads - 1, sizeof(kiln_worker));
  pool->blocks =
      (kiln_block *)aligned_alloc(64, (size_t)threads * sizeof(kiln_block));
  if (!pool->workers || !pool->worker_args || !pool->blocks)
    return fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate the thread pool");
  for (int i = 0; i < threads - 1; ++i) {
    pool->worker_args[i].pool = pool;
    pool->worker_args[i].index = i + 1;
    int error = pthread_create(&pool->workers[i], NULL, worker_main,
                               &pool->worker_args[i]);
    if (error)
      return fail(KILN_ERROR_SYSTEM, "cannot start a thread: %s",
                  strerror(error));
    pool->started = i + 1;
  }
  pool->threads = threads;
  return KILN_OK;
}

/* The chunks `threads` threads take `units` units of equal work in, as the
   JIT's equalChunks: the most, at most four a thread, that are a multiple
   of the threads and divide the units; else one unit a chunk. */
static int64_t equal_chunks(int64_t units, int threads) {
  for (int64_t chunks = 4 * (int64_t)threads; chunks > 0; chunks -= threads)
    if (chunks <= units && units % chunks == 0)
      return chunks;
  return units;
}

/* Runs `kernel` of `step` over [0, range) as kiln's JIT does: inline when
   the step is small, else about four chunks per thread on boundaries that
   keep vector loops whole, or equal_chunks where `equal_units` (a GEMM's
   tiles). */
static void run_parallel(kiln_pool *pool, const kiln_step_desc *step,
                         kiln_kernel kernel, int64_t range, int64_t alignment,
                         int equal_units, char *const *arguments) {
  if (pool->threads <= 1 || step->work < 32768 || range < 2) {
    kernel(arguments, 0, range);
    return;
  }
  int64_t chunk_count = (int64_t)pool->threads * 4;
  if (chunk_count > range)
    chunk_count = range;
  int64_t chunk_size = (range + chunk_count - 1) / chunk_count;
  chunk_size = (chunk_size + alignment - 1) / alignment * alignment;
  if (equal_units)
    chunk_size = range / equal_chunks(range, pool->threads);
  pool->kernel = kernel;
  pool->arguments = arguments;
  pool->range = range;
  pool->chunk_size = chunk_size;
  pool->chunk_count = (range + chunk_size - 1) / chunk_size;
  int64_t takers =
      pool->chunk_count < pool->threads ? pool->chunk_count : pool->threads;
  pool->takers = (int)takers;
  for (int64_t t = 0; t < takers; ++t) {
    atomic_store(&pool->blocks[t].next, t * pool->chunk_count / takers);
    pool->blocks[t].end = (t + 1) * pool->chunk_count / takers;
  }
  atomic_store(&pool->pending, pool->threads - 1);
  pthread_mutex_lock(&pool->mutex);
  atomic_fetch_add(&pool->generation, 1);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  run_chunks(pool, 0);
  while (atomic_load(&pool->pending) > 0) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

/* ------------------------------------------------------------- weights */

/* The weights file: a header, a table of (offset, bytes) per weight, and the
   weights from a 64-byte aligned payload. Little-endian. */
#define WEIGHTS_MAGIC "KILNWTS"
#define WEIGHTS_VERSION 1u
#define WEIGHTS_HEADER_BYTES 48

static uint64_t read_u64(const unsigned char *bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | bytes[i];
  return value;
}

static uint32_t read_u32(const unsigned char *bytes) {
  return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 |
         (uint32_t)bytes[2] << 16 | (uint32_t)bytes[3] << 24;
}

/* FNV-1a over 64-bit little-endian words, then the tail bytes: kiln's
   exporter computes the same. */
static uint64_t checksum(const unsigned char *bytes, uint64_t count) {
  uint64_t hash = 0xcbf29ce484222325ull;
  uint64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    hash ^= read_u64(bytes + i);
    hash *= 0x100000001b3ull;
  }
  for (; i < count; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

static uint64_t payload_start(void) {
  uint64_t table = WEIGHTS_HEADER_BYTES + 16ull * WEIGHT_COUNT;
  return (table + 63) / 64 * 64;
}

/* Checks a whole weights image (file contents or the embedded copy) and
   points `weights` at each weight in it. */
static kiln_status check_weights(const unsigned char *image, uint64_t size,
                                 const char *origin,
                                 const unsigned char **weights) {
  if (size < WEIGHTS_HEADER_BYTES || memcmp(image, WEIGHTS_MAGIC, 8) != 0)
    return fail(KILN_ERROR_BAD_WEIGHTS,
                "%s is not a kiln weights file (no KILNWTS header)", origin);
  uint32_t version = read_u32(image + 8);
  if (version != WEIGHTS_VERSION)
    return fail(KILN_ERROR_BAD_WEIGHTS,
                "%s has weights format version %u; this model reads version "
                "%u",
                origin, version, WEIGHTS_VERSION);
  uint32_t count = read_u32(image + 12);
  uint64_t fingerprint = read_u64(image + 16);
  uint64_t payload_bytes = read_u64(image + 24);
  uint64_t expected_sum = read_u64(image + 32);
  if (fingerprint != MODEL_FINGERPRINT || count != WEIGHT_COUNT)
    return fail(KILN_ERROR_BAD_WEIGHTS,
                "%s holds the weights of another export (%u weights, "
                "fingerprint %016llx; this model has %d weights, fingerprint "
                "%016llx): export the model and its weights together",
                origin, count, (unsigned long long)fingerprint, WEIGHT_COUNT,
                (unsigned long long)MODEL_FINGERPRINT);
  uint64_t start = payload_start();
  if (size < start || size - start < payload_bytes)
    return fail(KILN_ERROR_BAD_WEIGHTS,
                "%s is truncated: %llu bytes, the header says %llu", origin,
                (unsigned long long)size,
                (unsigned long long)(start + payload_bytes));
  if (checksum(image + start, payload_bytes) != expected_sum)
    return fail(KILN_ERROR_BAD_WEIGHTS,
                "%s is corrupted: its checksum does not match its contents",
                origin);
  for (int i = 0; i < WEIGHT_COUNT; ++i) {
    const unsigned char *entry = image + WEIGHTS_HEADER_BYTES + 16 * i;
    uint64_t offset = read_u64(entry), bytes = read_u64(entry + 8);
    if (bytes != (uint64_t)WEIGHTS[i].bytes || offset > payload_bytes ||
        payload_bytes - offset < bytes || offset % 64 != 0)
      return fail(KILN_ERROR_BAD_WEIGHTS,
                  "%s: weight %d (%s) has %llu bytes at offset %llu; the "
                  "model expects %lld bytes",
                  origin, i, WEIGHTS[i].name, (unsigned long long)bytes,
                  (unsigned long long)offset, (long long)WEIGHTS[i].bytes);
    weights[i] = image + start + offset;
  }
  return KILN_OK;
}

static kiln_status read_file(const char *path, unsigned char **image,
                             uint64_t *size) {
  FILE *file = fopen(path, "rb");
  if (!file)
    return fail(KILN_ERROR_IO, "cannot open the weights file %s: %s", path,
                strerror(errno));
  kiln_status status = KILN_OK;
  long length = -1;
  if (fseek(file, 0, SEEK_END) == 0)
    length = ftell(file);
  if (length < 0 || fseek(file, 0, SEEK_SET) != 0) {
    status = fail(KILN_ERROR_IO, "cannot read the weights file %s: %s", path,
                  strerror(errno));
  } else if (posix_memalign((void **)image, 64,
                            (size_t)(length > 0 ? length : 1)) != 0) {
    *image = NULL;
    status =
        fail(KILN_ERROR_OUT_OF_MEMORY,
             "cannot allocate %ld bytes for the weights file %s", length, path);
  } else if (fread(*image, 1, (size_t)length, file) != (size_t)length) {
    status = fail(KILN_ERROR_IO, "cannot read the weights file %s: %s", path,
                  ferror(file) ? strerror(errno) : "it ended early");
  }
  fclose(file);
  if (status != KILN_OK) {
    free(*image);
    *image = NULL;
  }
  *size = (uint64_t)length;
  return status;
}

/* --------------------------------------------------------------- model */

struct KILN_HANDLE {
  unsigned char *weights_image; /* the file's contents, or NULL (embedded) */
  const unsigned char *weights[WEIGHT_COUNT + 1];
  char *workspace;
  char *packed_b[STEP_COUNT + 1]; /* by step: its weight B packed ahead */
  char *owned[BUFFER_COUNT];
  char *addresses[BUFFER_COUNT];
  char *arguments[MAX_SLOTS + 1];
  kiln_pool pool;
  atomic_int running;
};

void KILN_API(destroy)(KILN_HANDLE *model) {
  if (!model)
    return;
  pool_stop(&model->pool);
  for (int b = 0; b < BUFFER_COUNT; ++b)
    free(model->owned[b]);
  free(model->workspace);
  for (int s = 0; s < STEP_COUNT; ++s)
    free(model->packed_b[s]);
  free(model->weights_image);
  free(model);
}

static char *allocate(int64_t bytes) {
  void *memory = NULL;
  if (posix_memalign(&memory, 64, (size_t)(bytes > 0 ? bytes : 1)) != 0)
    return NULL;
  return (char *)memory;
}

/* Points model->addresses at every buffer: the caller's inputs (NULL
   where `inputs` is NULL, and views of them), the weights, the workspace
   and the model's own memory. */
static void bind_addresses(KILN_HANDLE *model, const kiln_tensor *inputs) {
  char **addresses = model->addresses;
  for (int b = 0; b < BUFFER_COUNT; ++b) {
    const kiln_buffer_desc *buffer = &BUFFERS[b];
    switch (buffer->kind) {
    case BUFFER_INPUT:
      addresses[b] = inputs ? (char *)inputs[buffer->index].data : NULL;
      break;
    case BUFFER_WEIGHT:
      addresses[b] = (char *)model->weights[buffer->index];
      break;
    case BUFFER_WORKSPACE:
      addresses[b] = model->workspace + buffer->offset;
      break;
    case BUFFER_OWNED:
      addresses[b] = model->owned[b];
      break;
    default:
      break;
    }
  }
  /* Views come after their bases in VIEW_ORDER. */
  for (int v = 0; v < VIEW_COUNT; ++v) {
    int b = VIEW_ORDER[v];
    char *base = addresses[BUFFERS[b].index];
    addresses[b] = base ? base + BUFFERS[b].offset : NULL;
  }
}

/* The arguments of step `s` from the bound addresses. */
static void bind_arguments(KILN_HANDLE *model, int s) {
  const kiln_step_desc *step = &STEPS[s];
  for (int slot = 0; slot < step->slot_count; ++slot) {
    int32_t buffer = STEP_SLOTS[step->first_slot + slot];
    model->arguments[slot] =
        buffer == PACKED_B_SLOT ? model->packed_b[s] : model->addresses[buffer];
  }
}

/* Packs the weights that GEMMs read packed ahead, once per model. */
static kiln_status pack_weights(KILN_HANDLE *model) {
  bind_addresses(model, NULL);
  for (int s = 0; s < STEP_COUNT; ++s) {
    const kiln_step_desc *step = &STEPS[s];
    if (!step->pack_b)
      continue;
    if (!(model->packed_b[s] = allocate(step->packed_b_bytes)))
      return fail(KILN_ERROR_OUT_OF_MEMORY,
                  "cannot allocate %lld bytes for a packed weight",
                  (long long)step->packed_b_bytes);
    bind_arguments(model, s);
    run_parallel(&model->pool, step, step->pack_b, step->pack_range, 1, 0,
                 model->arguments);
  }
  return KILN_OK;
}

kiln_status KILN_API(create)(const char *weights_path, int num_threads,
                             KILN_HANDLE **result) {
  if (!result)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "create: `model` is NULL");
  *result = NULL;
  KILN_HANDLE *model = NULL;
  if (posix_memalign((void **)&model, 64, sizeof(KILN_HANDLE)) != 0)
    return fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate the model");
  memset(model, 0, sizeof(KILN_HANDLE));
  pool_init(&model->pool);
  kiln_status status = KILN_OK;
  if (weights_path) {
    uint64_t size = 0;
    status = read_file(weights_path, &model->weights_image, &size);
    if (status == KILN_OK)
      status = check_weights(model->weights_image, size, weights_path,
                             model->weights);
  } else if (EMBEDDED_WEIGHTS) {
    status = check_weights(embedded_weights_image(), embedded_weights_size(),
                           "the embedded weights", model->weights);
  } else if (WEIGHT_COUNT > 0) {
    status = fail(KILN_ERROR_INVALID_ARGUMENT,
                  "create: this model needs a weights file (it was exported "
                  "without embedded weights)");
  }
  if (status == KILN_OK && !(model->workspace = allocate(WORKSPACE_BYTES)))
    status = fail(KILN_ERROR_OUT_OF_MEMORY,
                  "cannot allocate %lld bytes of workspace",
                  (long long)WORKSPACE_BYTES);
  for (int b = 0; status == KILN_OK && b < BUFFER_COUNT; ++b)
    if (BUFFERS[b].kind == BUFFER_OWNED &&
        !(model->owned[b] = allocate(BUFFERS[b].bytes)))
      status = fail(KILN_ERROR_OUT_OF_MEMORY, "cannot allocate %lld bytes",
                    (long long)BUFFERS[b].bytes);
  if (status == KILN_OK) {
    int threads = num_threads;
    if (threads <= 0) {
      const char *text = getenv("KILN_NUM_THREADS");
      threads = text ? atoi(text) : 0;
    }
    if (threads <= 0)
      threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0)
      threads = 1;
    status = pool_start(&model->pool, threads);
  }
  if (status == KILN_OK)
    status = pack_weights(model);
  if (status != KILN_OK) {
    KILN_API(destroy)(model);
    return status;
  }
  *result = model;
  return KILN_OK;
}

static const char *dtype_name(int32_t dtype) {
  static const char *const names[] = {
      "bool",    "uint8",    "int8",    "int16",   "int32",     "int64",
      "float16", "bfloat16", "float32", "float64", "complex64", "complex128"};
  return dtype >= 0 && dtype < 12 ? names[dtype] : "an unknown dtype";
}

static kiln_status check_input(size_t index, const kiln_tensor *given) {
  const kiln_tensor_desc *expected = &INPUTS[index];
  if (given->dtype != expected->dtype)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "input %zu (%s) is %s; the model takes %s", index,
                expected->name, dtype_name(given->dtype),
                dtype_name(expected->dtype));
  if (given->rank != expected->rank)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "input %zu (%s) has rank %d; the model takes rank %d", index,
                expected->name, (int)given->rank, (int)expected->rank);
  if (expected->rank > 0 && !given->sizes)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "input %zu (%s) has no sizes",
                index, expected->name);
  int64_t numel = 1, contiguous = 1;
  for (int d = expected->rank - 1; d >= 0; --d) {
    if (given->sizes[d] != expected->sizes[d])
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "input %zu (%s) has size %lld in dimension %d; the model "
                  "was exported for %lld",
                  index, expected->name, (long long)given->sizes[d], d,
                  (long long)expected->sizes[d]);
    int64_t stride = given->strides ? given->strides[d] : contiguous;
    if (expected->sizes[d] > 1 && stride != expected->strides[d])
      return fail(KILN_ERROR_INVALID_ARGUMENT,
                  "input %zu (%s) has stride %lld in dimension %d; the model "
                  "was exported for %lld",
                  index, expected->name, (long long)stride, d,
                  (long long)expected->strides[d]);
    numel *= expected->sizes[d];
    contiguous *= expected->sizes[d];
  }
  if (numel > 0 && !given->data)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "input %zu (%s) has no data",
                index, expected->name);
  return KILN_OK;
}

/* An id out of range is an error before any step runs, as torch's
   IndexError is. */
static kiln_status check_indices(const kiln_tensor *inputs) {
  for (int c = 0; c < INDEX_CHECK_COUNT; ++c) {
    const kiln_index_check *check = &INDEX_CHECKS[c];
    int64_t count = 1;
    for (int d = 0; d < check->rank; ++d)
      count *= check->sizes[d];
    if (count == 0)
      continue;
    int64_t position[INDEX_CHECK_RANK] = {0};
    int wide = check->dtype == KILN_INT64;
    const char *data = (const char *)inputs[check->input].data +
                       check->offset * (wide ? 8 : 4);
    for (int64_t element = 0; element < count; ++element) {
      int64_t offset = 0;
      for (int d = 0; d < check->rank; ++d)
        offset += position[d] * check->strides[d];
      int64_t id = wide ? ((const int64_t *)data)[offset]
                        : ((const int32_t *)data)[offset];
      int64_t least = check->from_end ? -check->rows : 0;
      if ((id < least || id >= check->rows) &&
          !(check->has_ignored && id == check->ignored)) {
        if (check->report == 3)
          return fail(KILN_ERROR_INVALID_ARGUMENT,
                      "run: input %d (%s): Target %lld is out of bounds "
                      "(%lld classes)",
                      (int)check->input, INPUTS[check->input].name,
                      (long long)id, (long long)check->rows);
        if (check->report != 0)
          return fail(KILN_ERROR_INVALID_ARGUMENT,
                      "run: input %d (%s): index %lld is out of bounds for "
                      "dimension %lld with size %lld",
                      (int)check->input, INPUTS[check->input].name,
                      (long long)id, (long long)check->dim,
                      (long long)check->rows);
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "run: input %d (%s): index out of range in self (id "
                    "%lld, the table has %lld rows)",
                    (int)check->input, INPUTS[check->input].name, (long long)id,
                    (long long)check->rows);
      }
      for (int d = check->rank - 1; d >= 0; --d) {
        if (++position[d] < check->sizes[d])
          break;
        position[d] = 0;
      }
    }
  }
  return KILN_OK;
}

kiln_status KILN_API(run)(KILN_HANDLE *model, const kiln_tensor *inputs,
                          size_t num_inputs, kiln_tensor *outputs,
                          size_t num_outputs) {
  if (!model)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "run: `model` is NULL");
  if (num_inputs != INPUT_COUNT)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "run: the model takes %d inputs, got %zu", INPUT_COUNT,
                num_inputs);
  if (num_outputs != OUTPUT_COUNT)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "run: the model gives %d outputs, room for %zu was passed",
                OUTPUT_COUNT, num_outputs);
  if ((INPUT_COUNT > 0 && !inputs) || (OUTPUT_COUNT > 0 && !outputs))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "run: `inputs` or `outputs` is NULL");
  for (size_t i = 0; i < num_inputs; ++i) {
    kiln_status status = check_input(i, &inputs[i]);
    if (status != KILN_OK)
      return status;
  }
  kiln_status status = check_indices(inputs);
  if (status != KILN_OK)
    return status;
  int idle = 0;
  if (!atomic_compare_exchange_strong(&model->running, &idle, 1))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "run: the model is already running on another thread (create "
                "one model per thread)");
  bind_addresses(model, inputs);
  for (int s = 0; s < STEP_COUNT; ++s) {
    bind_arguments(model, s);
    run_parallel(&model->pool, &STEPS[s], STEPS[s].kernel,
                 STEPS[s].parallel_range, STEPS[s].alignment,
                 STEPS[s].equal_units, model->arguments);
  }
  for (size_t o = 0; o < num_outputs; ++o) {
    const kiln_tensor_desc *output = &OUTPUTS[o];
    outputs[o].data = model->addresses[output->buffer];
    outputs[o].dtype = output->dtype;
    outputs[o].rank = output->rank;
    outputs[o].sizes = output->sizes;
    outputs[o].strides = output->strides;
  }
  atomic_store(&model->running, 0);
  return KILN_OK;
}

size_t KILN_API(num_inputs)(void) { return INPUT_COUNT; }

size_t KILN_API(num_outputs)(void) { return OUTPUT_COUNT; }

static kiln_status describe(const kiln_tensor_desc *tensor,
                            kiln_tensor_info *info) {
  if (!info)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "`info` is NULL");
  info->name = tensor->name;
  info->dtype = tensor->dtype;
  info->rank = tensor->rank;
  info->sizes = tensor->sizes;
  info->strides = tensor->strides;
  return KILN_OK;
}

kiln_status KILN_API(input_info)(size_t index, kiln_tensor_info *info) {
  if (index >= INPUT_COUNT)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "input_info: the model has %d inputs, there is no input %zu",
                INPUT_COUNT, index);
  return describe(&INPUTS[index], info);
}

kiln_status KILN_API(output_info)(size_t index, kiln_tensor_info *info) {
  if (index >= OUTPUT_COUNT)
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "output_info: the model has %d outputs, there is no output "
                "%zu",
                OUTPUT_COUNT, index);
  return describe(&OUTPUTS[index], info);
}
