/*
 * gpucaas test double of libnvfm: keeps Fabric Manager state in memory and
 * applies the shared NVSwitch rules, so the ctypes binding round-trips.
 * See nv_fm_fake.h. Built by the tests: gcc -shared -fPIC -pthread.
 *
 * Rules (the same as services/fabric/fabric_manager/simulator.py):
 *  - HGX H100 default partition table (ids 0..14);
 *  - partitions sharing a GPU are never active together (FM_ST_IN_USE),
 *    activating an active partition is FM_ST_IN_USE too;
 *  - a GPU with failed NVLinks makes its partitions unsupported: they leave the
 *    supported list (unless active) and appear in the unsupported list;
 *    activating one is FM_ST_BADPARAM, as for an unknown id;
 *  - deactivating an inactive partition is FM_ST_UNINITIALIZED;
 *  - fakeFmStop() invalidates every connection (FM_ST_CONNECTION_NOT_VALID);
 *    fakeFmStart(1) comes back in resiliency mode: nothing active and
 *    activate/deactivate refused with FM_ST_NOT_CONFIGURED until
 *    fmSetActivatedFabricPartitions sets the list (which becomes the active set).
 *
 * Fabric Manager modes, per the NVIDIA Fabric Manager User Guide (see
 * docs/fabric-manager.md for the rule list and the sections cited):
 *  - restart mode (FABRIC_MODE_RESTART=1; "Fabric Manager Restart Mode",
 *    "Resiliency"): until the activated list arrives every call but
 *    fmSetActivatedFabricPartitions is refused (FM_ST_NOT_CONFIGURED); without
 *    the list within 60 s (fakeFmSetRestartTimeoutMs) FM exits;
 *    fmGetNvlinkFailedDevices is not supported in this mode (FM_ST_NOT_SUPPORTED);
 *  - fmSetActivatedFabricPartitions outside a restart is refused (FM_ST_NOT_SUPPORTED);
 *  - H100 (fakeFmSetH100(1); "GPU Partitions" for DGX/HGX H100, degraded-mode
 *    handling): partition info carries no UUID/PCI bus id, the supported list is
 *    returned regardless of GPU degradation (a degraded GPU shows fewer NVLinks
 *    available), the unsupported and failed-device lists are empty.
 *  - fakeFmStall: a silent Fabric Manager; calls block (outside the state lock,
 *    as the real library blocks on its socket) for ms, or until released.
 */
#include "nv_fm_fake.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define NUM_PARTITIONS 15
#define NUM_GPUS 8
#define NVLINKS_PER_GPU 18
#define LINE_RATE_MBPS 26562
#define MAX_CONNS 32
#define CONN_MAGIC 0x46414b45u

typedef struct {
    unsigned int id;
    unsigned int numGpus;
    unsigned int gpus[8]; /* physical ids */
} partition_def;

static const partition_def TABLE[NUM_PARTITIONS] = {
    {0, 8, {1, 2, 3, 4, 5, 6, 7, 8}},
    {1, 4, {1, 2, 3, 4}}, {2, 4, {5, 6, 7, 8}},
    {3, 2, {1, 3}}, {4, 2, {2, 4}}, {5, 2, {5, 7}}, {6, 2, {6, 8}},
    {7, 1, {1}}, {8, 1, {2}}, {9, 1, {3}}, {10, 1, {4}},
    {11, 1, {5}}, {12, 1, {6}}, {13, 1, {7}}, {14, 1, {8}},
};

typedef struct {
    unsigned int magic;
    int inUse;
    unsigned int epoch;
} conn_t;

typedef struct {
    char pciBusId[FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int numPorts;
    unsigned int ports[FM_MAX_NUM_NVLINK_PORTS];
} failure_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int libInitialized = 0;
static int running = 1;
static int awaitingList = 0;
static unsigned int epoch = 1;
static int active[NUM_PARTITIONS];
static char gpuPci[NUM_GPUS + 1][FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
static failure_t gpuFailure[NUM_GPUS + 1]; /* numPorts 0: healthy */
static failure_t switchFailure[FM_MAX_NUM_NVSWITCHES];
static unsigned int numSwitchFailures = 0;
static conn_t conns[MAX_CONNS];
static char lastAddress[FM_MAX_STR_LENGTH];
static unsigned int lastTimeoutMs = 0;
static int lastIsUnix = 0;
static char failNextName[64];
static fmReturn_t failNextRc = FM_ST_SUCCESS;
static int h100 = 0;
static int restartMode = 0;            /* this FM process started with FABRIC_MODE_RESTART=1 */
static unsigned int restartTimeoutMs = 60000;
static long long restartDeadlineMs = 0;
static int lastConnectVersion = 0;

static pthread_mutex_t stallMu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stallCv = PTHREAD_COND_INITIALIZER;
static int stallMs = 0;
static unsigned int stallGen = 0;
static int stalledCalls = 0;

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A silent Fabric Manager: block before touching state (no lock held), like the
 * real library waiting on its socket. */
static void stall(void) {
    pthread_mutex_lock(&stallMu);
    if (stallMs == 0) {
        pthread_mutex_unlock(&stallMu);
        return;
    }
    stalledCalls++;
    unsigned int gen = stallGen;
    if (stallMs < 0) {
        while (stallMs < 0 && stallGen == gen) pthread_cond_wait(&stallCv, &stallMu);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (long long)stallMs * 1000000;
        until.tv_sec += ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        while (stallGen == gen && pthread_cond_timedwait(&stallCv, &stallMu, &until) == 0) {
        }
    }
    stalledCalls--;
    pthread_mutex_unlock(&stallMu);
}

/* Restart mode: FM exits when the activated list did not come in time; caller holds mu. */
static void check_restart_deadline(void) {
    if (running && awaitingList && now_ms() > restartDeadlineMs) {
        running = 0;
        awaitingList = 0;
        epoch++;
        fprintf(stderr, "libnvfm fake: no activated partition list within %u ms in restart mode: "
                        "fabric manager exits\n", restartTimeoutMs);
    }
}

/* An injected failure for this function (fakeFmFailNext), consumed once; caller holds mu. */
static int take_failure(const char *fn, fmReturn_t *rc) {
    if (failNextName[0] == '\0' || strcmp(failNextName, fn) != 0) return 0;
    failNextName[0] = '\0';
    *rc = failNextRc;
    return 1;
}

#define INJECTED() do { fmReturn_t f_; if (take_failure(__func__, &f_)) LOCKED_RETURN(f_); } while (0)

static const char *DEFAULT_PCI[NUM_GPUS + 1] = {
    "", "00000000:3A:00.0", "00000000:18:00.0", "00000000:5D:00.0", "00000000:2A:00.0",
    "00000000:AB:00.0", "00000000:DB:00.0", "00000000:9A:00.0", "00000000:BA:00.0",
};

static void copy_str(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src ? src : "");
}

static void reset_locked(void) {
    failNextName[0] = '\0';
    running = 1;
    awaitingList = 0;
    restartMode = 0;
    h100 = 0;
    restartTimeoutMs = 60000;
    epoch++;
    memset(active, 0, sizeof(active));
    memset(gpuFailure, 0, sizeof(gpuFailure));
    memset(switchFailure, 0, sizeof(switchFailure));
    numSwitchFailures = 0;
    for (int g = 1; g <= NUM_GPUS; g++) copy_str(gpuPci[g], sizeof(gpuPci[g]), DEFAULT_PCI[g]);
}

static int gpus_overlap(const partition_def *a, const partition_def *b) {
    for (unsigned int i = 0; i < a->numGpus; i++)
        for (unsigned int j = 0; j < b->numGpus; j++)
            if (a->gpus[i] == b->gpus[j]) return 1;
    return 0;
}

static int unsupported(const partition_def *p) {
    if (h100) return 0; /* H100: partitions stay supported whatever the GPU degradation */
    for (unsigned int i = 0; i < p->numGpus; i++)
        if (gpuFailure[p->gpus[i]].numPorts > 0) return 1;
    return 0;
}

static const partition_def *find_partition(unsigned int id) {
    return id < NUM_PARTITIONS ? &TABLE[id] : NULL;
}

/* Common checks on a handle; the caller holds mu. */
static fmReturn_t check_handle(fmHandle_t h) {
    if (!libInitialized) return FM_ST_UNINITIALIZED;
    check_restart_deadline();
    conn_t *c = (conn_t *)h;
    if (c < &conns[0] || c >= &conns[MAX_CONNS] || c->magic != CONN_MAGIC || !c->inUse)
        return FM_ST_BADPARAM;
    if (!running || c->epoch != epoch) return FM_ST_CONNECTION_NOT_VALID;
    return FM_ST_SUCCESS;
}

#define LOCKED_RETURN(rc) do { fmReturn_t r_ = (rc); pthread_mutex_unlock(&mu); return r_; } while (0)

fmReturn_t fmLibInit(void) {
    pthread_mutex_lock(&mu);
    if (libInitialized) LOCKED_RETURN(FM_ST_IN_USE);
    libInitialized = 1;
    if (gpuPci[1][0] == '\0') reset_locked();
    LOCKED_RETURN(FM_ST_SUCCESS);
}

fmReturn_t fmLibShutdown(void) {
    pthread_mutex_lock(&mu);
    if (!libInitialized) LOCKED_RETURN(FM_ST_UNINITIALIZED);
    libInitialized = 0;
    for (int i = 0; i < MAX_CONNS; i++) conns[i].inUse = 0;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

fmReturn_t fmConnect(fmConnectParams_t *params, fmHandle_t *pFmHandle) {
    stall();
    pthread_mutex_lock(&mu);
    INJECTED();
    if (!libInitialized) LOCKED_RETURN(FM_ST_UNINITIALIZED);
    if (params == NULL || pFmHandle == NULL) LOCKED_RETURN(FM_ST_BADPARAM);
    lastConnectVersion = (int)(params->version >> 24);
    if (params->version != fmConnectParams_version) LOCKED_RETURN(FM_ST_VERSION_MISMATCH);
    if (memchr(params->addressInfo, '\0', sizeof(params->addressInfo)) == NULL ||
        params->addressInfo[0] == '\0')
        LOCKED_RETURN(FM_ST_BADPARAM);
    copy_str(lastAddress, sizeof(lastAddress), params->addressInfo);
    lastTimeoutMs = params->timeoutMs;
#ifdef NVFM_FAKE_API_V2
    lastIsUnix = params->addressType == NV_FM_API_ADDR_TYPE_UNIX;
#else
    lastIsUnix = (int)params->addressIsUnixSocket;
#endif
    check_restart_deadline();
    if (!running) LOCKED_RETURN(FM_ST_CONNECTION_NOT_VALID);
    for (int i = 0; i < MAX_CONNS; i++) {
        if (!conns[i].inUse) {
            conns[i].magic = CONN_MAGIC;
            conns[i].inUse = 1;
            conns[i].epoch = epoch;
            *pFmHandle = &conns[i];
            LOCKED_RETURN(FM_ST_SUCCESS);
        }
    }
    LOCKED_RETURN(FM_ST_GENERIC_ERROR);
}

fmReturn_t fmDisconnect(fmHandle_t h) {
    pthread_mutex_lock(&mu);
    if (!libInitialized) LOCKED_RETURN(FM_ST_UNINITIALIZED);
    conn_t *c = (conn_t *)h;
    if (c < &conns[0] || c >= &conns[MAX_CONNS] || c->magic != CONN_MAGIC || !c->inUse)
        LOCKED_RETURN(FM_ST_BADPARAM);
    c->inUse = 0;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

static void fill_gpu(fmFabricPartitionGpuInfo_t *out, unsigned int g, int multi) {
    memset(out, 0, sizeof(*out));
    out->physicalId = g;
    if (!h100) { /* H100: UUID and PCI bus id are empty; physicalId is the module id */
        snprintf(out->uuid, sizeof(out->uuid), "GPU-fa6e0000-0000-4000-8000-%012x", g);
        copy_str(out->pciBusId, sizeof(out->pciBusId), gpuPci[g]);
    }
    unsigned int failed = gpuFailure[g].numPorts;
    out->numNvLinksAvailable = multi ? (failed >= NVLINKS_PER_GPU ? 0 : NVLINKS_PER_GPU - failed) : 0;
    out->maxNumNvLinks = NVLINKS_PER_GPU;
    out->nvlinkLineRateMBps = LINE_RATE_MBPS;
}

fmReturn_t fmGetSupportedFabricPartitions(fmHandle_t h, fmFabricPartitionList_t *list) {
    stall();
    pthread_mutex_lock(&mu);
    INJECTED();
    fmReturn_t rc = check_handle(h);
    if (rc != FM_ST_SUCCESS) LOCKED_RETURN(rc);
    if (list == NULL) LOCKED_RETURN(FM_ST_BADPARAM);
    if (list->version != fmFabricPartitionList_version) LOCKED_RETURN(FM_ST_VERSION_MISMATCH);
    if (awaitingList) LOCKED_RETURN(FM_ST_NOT_CONFIGURED);
    unsigned int n = 0;
    for (unsigned int i = 0; i < NUM_PARTITIONS; i++) {
        const partition_def *p = &TABLE[i];
        if (unsupported(p) && !active[i]) continue;
        fmFabricPartitionInfo_t *out = &list->partitionInfo[n++];
        memset(out, 0, sizeof(*out));
        out->partitionId = p->id;
        out->isActive = (unsigned int)active[i];
        out->numGpus = p->numGpus;
        for (unsigned int j = 0; j < p->numGpus; j++)
            fill_gpu(&out->gpuInfo[j], p->gpus[j], p->numGpus > 1);
    }
    list->numPartitions = n;
    list->maxNumPartitions = NUM_PARTITIONS;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

fmReturn_t fmActivateFabricPartition(fmHandle_t h, fmFabricPartitionId_t id) {
    stall();
    pthread_mutex_lock(&mu);
    INJECTED();
    fmReturn_t rc = check_handle(h);
    if (rc != FM_ST_SUCCESS) LOCKED_RETURN(rc);
    if (awaitingList) LOCKED_RETURN(FM_ST_NOT_CONFIGURED);
    const partition_def *p = find_partition(id);
    if (p == NULL || unsupported(p)) LOCKED_RETURN(FM_ST_BADPARAM);
    for (unsigned int i = 0; i < NUM_PARTITIONS; i++)
        if (active[i] && gpus_overlap(p, &TABLE[i])) LOCKED_RETURN(FM_ST_IN_USE);
    active[id] = 1;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

fmReturn_t fmDeactivateFabricPartition(fmHandle_t h, fmFabricPartitionId_t id) {
    stall();
    pthread_mutex_lock(&mu);
    INJECTED();
    fmReturn_t rc = check_handle(h);
    if (rc != FM_ST_SUCCESS) LOCKED_RETURN(rc);
    if (awaitingList) LOCKED_RETURN(FM_ST_NOT_CONFIGURED);
    if (find_partition(id) == NULL) LOCKED_RETURN(FM_ST_BADPARAM);
    if (!active[id]) LOCKED_RETURN(FM_ST_UNINITIALIZED);
    active[id] = 0;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

fmReturn_t fmSetActivatedFabricPartitions(fmHandle_t h, fmActivatedFabricPartitionList_t *list) {
    stall();
    pthread_mutex_lock(&mu);
    INJECTED();
    fmReturn_t rc = check_handle(h);
    if (rc != FM_ST_SUCCESS) LOCKED_RETURN(rc);
    if (list == NULL) LOCKED_RETURN(FM_ST_BADPARAM);
    if (list->version != fmActivatedFabricPartitionList_version)
        LOCKED_RETURN(FM_ST_VERSION_MISMATCH);
    if (!awaitingList) LOCKED_RETURN(FM_ST_NOT_SUPPORTED); /* only after a restart */
    if (list->numPartitions > FM_MAX_FABRIC_PARTITIONS) LOCKED_RETURN(FM_ST_BADPARAM);
    int wanted[NUM_PARTITIONS] = {0};
    for (unsigned int i = 0; i < list->numPartitions; i++) {
        const partition_def *p = find_partition(list->partitionIds[i]);
        if (p == NULL || wanted[p->id]) LOCKED_RETURN(FM_ST_BADPARAM);
        for (unsigned int j = 0; j < NUM_PARTITIONS; j++)
            if (wanted[j] && gpus_overlap(p, &TABLE[j])) LOCKED_RETURN(FM_ST_BADPARAM);
        wanted[p->id] = 1;
    }
    memcpy(active, wanted, sizeof(active));
    awaitingList = 0;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

fmReturn_t fmGetNvlinkFailedDevices(fmHandle_t h, fmNvlinkFailedDevices_t *out) {
    stall();
    pthread_mutex_lock(&mu);
    INJECTED();
    fmReturn_t rc = check_handle(h);
    if (rc != FM_ST_SUCCESS) LOCKED_RETURN(rc);
    if (out == NULL) LOCKED_RETURN(FM_ST_BADPARAM);
    if (out->version != fmNvlinkFailedDevices_version) LOCKED_RETURN(FM_ST_VERSION_MISMATCH);
    if (restartMode) LOCKED_RETURN(FM_ST_NOT_SUPPORTED);
    out->numGpus = 0;
    out->numSwitches = 0;
    if (h100) LOCKED_RETURN(FM_ST_SUCCESS); /* H100: the failed-device list is always empty */
    unsigned int n = 0;
    for (unsigned int g = 1; g <= NUM_GPUS; g++) {
        if (gpuFailure[g].numPorts == 0) continue;
        fmNvlinkFailedDeviceInfo_t *d = &out->gpuInfo[n++];
        memset(d, 0, sizeof(*d));
        snprintf(d->uuid, sizeof(d->uuid), "GPU-fa6e0000-0000-4000-8000-%012x", g);
        copy_str(d->pciBusId, sizeof(d->pciBusId), gpuPci[g]);
        d->numPorts = gpuFailure[g].numPorts;
        memcpy(d->portNum, gpuFailure[g].ports, sizeof(d->portNum));
    }
    out->numGpus = n;
    for (unsigned int s = 0; s < numSwitchFailures; s++) {
        fmNvlinkFailedDeviceInfo_t *d = &out->switchInfo[s];
        memset(d, 0, sizeof(*d));
        copy_str(d->pciBusId, sizeof(d->pciBusId), switchFailure[s].pciBusId);
        d->numPorts = switchFailure[s].numPorts;
        memcpy(d->portNum, switchFailure[s].ports, sizeof(d->portNum));
    }
    out->numSwitches = numSwitchFailures;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

fmReturn_t fmGetUnsupportedFabricPartitions(fmHandle_t h, fmUnsupportedFabricPartitionList_t *out) {
    stall();
    pthread_mutex_lock(&mu);
    INJECTED();
    fmReturn_t rc = check_handle(h);
    if (rc != FM_ST_SUCCESS) LOCKED_RETURN(rc);
    if (out == NULL) LOCKED_RETURN(FM_ST_BADPARAM);
    if (out->version != fmUnsupportedFabricPartitionList_version)
        LOCKED_RETURN(FM_ST_VERSION_MISMATCH);
    if (awaitingList) LOCKED_RETURN(FM_ST_NOT_CONFIGURED);
    unsigned int n = 0;
    for (unsigned int i = 0; i < NUM_PARTITIONS; i++) {
        const partition_def *p = &TABLE[i];
        if (!unsupported(p)) continue;
        fmUnsupportedFabricPartitionInfo_t *u = &out->partitionInfo[n++];
        memset(u, 0, sizeof(*u));
        u->partitionId = p->id;
        u->numGpus = p->numGpus;
        for (unsigned int j = 0; j < p->numGpus; j++) u->gpuPhysicalIds[j] = p->gpus[j];
    }
    out->numPartitions = n;
    LOCKED_RETURN(FM_ST_SUCCESS);
}

/* ---- test controls ------------------------------------------------------------- */
void fakeFmReset(void) {
    pthread_mutex_lock(&mu);
    reset_locked();
    pthread_mutex_unlock(&mu);
}

void fakeFmStop(void) {
    pthread_mutex_lock(&mu);
    if (running) {
        running = 0;
        epoch++;
        memset(active, 0, sizeof(active));
    }
    pthread_mutex_unlock(&mu);
}

void fakeFmStart(int resiliency) {
    pthread_mutex_lock(&mu);
    if (!running) {
        running = 1;
        memset(active, 0, sizeof(active));
        awaitingList = resiliency ? 1 : 0;
        restartMode = resiliency ? 1 : 0;
        restartDeadlineMs = now_ms() + restartTimeoutMs;
    }
    pthread_mutex_unlock(&mu);
}

int fakeFmSetGpu(unsigned int physicalId, const char *pciBusId) {
    if (physicalId < 1 || physicalId > NUM_GPUS || pciBusId == NULL) return -1;
    pthread_mutex_lock(&mu);
    if (gpuPci[1][0] == '\0') reset_locked();
    copy_str(gpuPci[physicalId], sizeof(gpuPci[physicalId]), pciBusId);
    pthread_mutex_unlock(&mu);
    return 0;
}

static void add_port(failure_t *f, unsigned int port) {
    for (unsigned int i = 0; i < f->numPorts; i++)
        if (f->ports[i] == port) return;
    if (f->numPorts < FM_MAX_NUM_NVLINK_PORTS) f->ports[f->numPorts++] = port;
}

int fakeFmInjectGpuFailure(unsigned int physicalId, unsigned int port) {
    if (physicalId < 1 || physicalId > NUM_GPUS || port >= FM_MAX_NUM_NVLINK_PORTS) return -1;
    pthread_mutex_lock(&mu);
    add_port(&gpuFailure[physicalId], port);
    pthread_mutex_unlock(&mu);
    return 0;
}

int fakeFmClearGpuFailure(unsigned int physicalId) {
    if (physicalId < 1 || physicalId > NUM_GPUS) return -1;
    pthread_mutex_lock(&mu);
    memset(&gpuFailure[physicalId], 0, sizeof(gpuFailure[physicalId]));
    pthread_mutex_unlock(&mu);
    return 0;
}

int fakeFmInjectSwitchFailure(const char *pciBusId, unsigned int port) {
    if (pciBusId == NULL || port >= FM_MAX_NUM_NVLINK_PORTS) return -1;
    pthread_mutex_lock(&mu);
    for (unsigned int s = 0; s < numSwitchFailures; s++) {
        if (strcmp(switchFailure[s].pciBusId, pciBusId) == 0) {
            add_port(&switchFailure[s], port);
            pthread_mutex_unlock(&mu);
            return 0;
        }
    }
    if (numSwitchFailures >= FM_MAX_NUM_NVSWITCHES) {
        pthread_mutex_unlock(&mu);
        return -1;
    }
    failure_t *f = &switchFailure[numSwitchFailures++];
    memset(f, 0, sizeof(*f));
    copy_str(f->pciBusId, sizeof(f->pciBusId), pciBusId);
    add_port(f, port);
    pthread_mutex_unlock(&mu);
    return 0;
}

int fakeFmIsActive(unsigned int partitionId) {
    if (partitionId >= NUM_PARTITIONS) return -1;
    pthread_mutex_lock(&mu);
    int a = active[partitionId];
    pthread_mutex_unlock(&mu);
    return a;
}

int fakeFmFailNext(const char *function, int rc) {
    if (function == NULL || strlen(function) >= sizeof(failNextName)) return -1;
    pthread_mutex_lock(&mu);
    copy_str(failNextName, sizeof(failNextName), function);
    failNextRc = (fmReturn_t)rc;
    pthread_mutex_unlock(&mu);
    return 0;
}

int fakeFmAwaitingList(void) {
    pthread_mutex_lock(&mu);
    check_restart_deadline();
    int a = awaitingList;
    pthread_mutex_unlock(&mu);
    return a;
}

int fakeFmRunning(void) {
    pthread_mutex_lock(&mu);
    check_restart_deadline();
    int r = running;
    pthread_mutex_unlock(&mu);
    return r;
}

void fakeFmSetH100(int on) {
    pthread_mutex_lock(&mu);
    h100 = on ? 1 : 0;
    pthread_mutex_unlock(&mu);
}

void fakeFmSetRestartTimeoutMs(unsigned int ms) {
    pthread_mutex_lock(&mu);
    restartTimeoutMs = ms;
    pthread_mutex_unlock(&mu);
}

void fakeFmStall(int ms) {
    pthread_mutex_lock(&stallMu);
    stallMs = ms;
    stallGen++;
    pthread_cond_broadcast(&stallCv);
    pthread_mutex_unlock(&stallMu);
}

int fakeFmStalledCalls(void) {
    pthread_mutex_lock(&stallMu);
    int n = stalledCalls;
    pthread_mutex_unlock(&stallMu);
    return n;
}

int fakeFmLastConnectVersion(void) { return lastConnectVersion; }
const char *fakeFmLastAddress(void) { return lastAddress; }
unsigned int fakeFmLastTimeoutMs(void) { return lastTimeoutMs; }
int fakeFmLastAddressIsUnixSocket(void) { return lastIsUnix; }

/* ---- layout report: sizeof and offsetof for the binding's structure test -------- */
typedef struct {
    const char *key;
    long value;
} layout_entry;

#define SIZE(T) {#T, (long)sizeof(T)}
#define OFF(T, f) {#T "." #f, (long)offsetof(T, f)}

static const layout_entry LAYOUT[] = {
    SIZE(fmConnectParams_v1), OFF(fmConnectParams_v1, version), OFF(fmConnectParams_v1, addressInfo),
    OFF(fmConnectParams_v1, timeoutMs), OFF(fmConnectParams_v1, addressIsUnixSocket),
    SIZE(fmConnectParams_v2), OFF(fmConnectParams_v2, version), OFF(fmConnectParams_v2, addressInfo),
    OFF(fmConnectParams_v2, timeoutMs), OFF(fmConnectParams_v2, addressIsUnixSocket),
    OFF(fmConnectParams_v2, addressType),
    SIZE(fmPciDevice_t), OFF(fmPciDevice_t, domain), OFF(fmPciDevice_t, bus),
    OFF(fmPciDevice_t, device), OFF(fmPciDevice_t, function),
    SIZE(fmFabricPartitionGpuInfo_t), OFF(fmFabricPartitionGpuInfo_t, physicalId),
    OFF(fmFabricPartitionGpuInfo_t, uuid), OFF(fmFabricPartitionGpuInfo_t, pciBusId),
    OFF(fmFabricPartitionGpuInfo_t, numNvLinksAvailable),
    OFF(fmFabricPartitionGpuInfo_t, maxNumNvLinks),
    OFF(fmFabricPartitionGpuInfo_t, nvlinkLineRateMBps),
    SIZE(fmFabricPartitionInfo_t), OFF(fmFabricPartitionInfo_t, partitionId),
    OFF(fmFabricPartitionInfo_t, isActive), OFF(fmFabricPartitionInfo_t, numGpus),
    OFF(fmFabricPartitionInfo_t, gpuInfo),
    SIZE(fmFabricPartitionList_t), OFF(fmFabricPartitionList_t, version),
    OFF(fmFabricPartitionList_t, numPartitions), OFF(fmFabricPartitionList_t, maxNumPartitions),
    OFF(fmFabricPartitionList_t, partitionInfo),
    SIZE(fmActivatedFabricPartitionList_t), OFF(fmActivatedFabricPartitionList_t, version),
    OFF(fmActivatedFabricPartitionList_t, numPartitions),
    OFF(fmActivatedFabricPartitionList_t, partitionIds),
    SIZE(fmNvlinkFailedDeviceInfo_t), OFF(fmNvlinkFailedDeviceInfo_t, uuid),
    OFF(fmNvlinkFailedDeviceInfo_t, pciBusId), OFF(fmNvlinkFailedDeviceInfo_t, numPorts),
    OFF(fmNvlinkFailedDeviceInfo_t, portNum),
    SIZE(fmNvlinkFailedDevices_t), OFF(fmNvlinkFailedDevices_t, version),
    OFF(fmNvlinkFailedDevices_t, numGpus), OFF(fmNvlinkFailedDevices_t, numSwitches),
    OFF(fmNvlinkFailedDevices_t, gpuInfo), OFF(fmNvlinkFailedDevices_t, switchInfo),
    SIZE(fmUnsupportedFabricPartitionInfo_t), OFF(fmUnsupportedFabricPartitionInfo_t, partitionId),
    OFF(fmUnsupportedFabricPartitionInfo_t, numGpus),
    OFF(fmUnsupportedFabricPartitionInfo_t, gpuPhysicalIds),
    SIZE(fmUnsupportedFabricPartitionList_t), OFF(fmUnsupportedFabricPartitionList_t, version),
    OFF(fmUnsupportedFabricPartitionList_t, numPartitions),
    OFF(fmUnsupportedFabricPartitionList_t, partitionInfo),
    {"FM_MAX_STR_LENGTH", FM_MAX_STR_LENGTH}, {"FM_UUID_BUFFER_SIZE", FM_UUID_BUFFER_SIZE},
    {"FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE", FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE},
    {"FM_MAX_NUM_GPUS", FM_MAX_NUM_GPUS}, {"FM_MAX_NUM_NVSWITCHES", FM_MAX_NUM_NVSWITCHES},
    {"FM_MAX_FABRIC_PARTITIONS", FM_MAX_FABRIC_PARTITIONS},
    {"FM_MAX_NUM_NVLINK_PORTS", FM_MAX_NUM_NVLINK_PORTS},
    {"FM_CMD_PORT_NUMBER", FM_CMD_PORT_NUMBER},
    {"FM_ST_BADPARAM", FM_ST_BADPARAM}, {"FM_ST_GENERIC_ERROR", FM_ST_GENERIC_ERROR},
    {"FM_ST_NOT_SUPPORTED", FM_ST_NOT_SUPPORTED}, {"FM_ST_UNINITIALIZED", FM_ST_UNINITIALIZED},
    {"FM_ST_TIMEOUT", FM_ST_TIMEOUT}, {"FM_ST_VERSION_MISMATCH", FM_ST_VERSION_MISMATCH},
    {"FM_ST_IN_USE", FM_ST_IN_USE}, {"FM_ST_NOT_CONFIGURED", FM_ST_NOT_CONFIGURED},
    {"FM_ST_CONNECTION_NOT_VALID", FM_ST_CONNECTION_NOT_VALID},
    {"FM_ST_NVLINK_ERROR", FM_ST_NVLINK_ERROR},
    {"fmConnectV1Params_version1", (long)fmConnectV1Params_version1},
    {"fmConnectV2Params_version2", (long)fmConnectV2Params_version2},
    {"FM_ST_RESOURCE_BAD", FM_ST_RESOURCE_BAD},
    {"FM_ST_RESOURCE_IN_USE", FM_ST_RESOURCE_IN_USE},
    {"FM_ST_RESOURCE_NOT_IN_USE", FM_ST_RESOURCE_NOT_IN_USE},
    {"FM_ST_RESOURCE_EXHAUSTED", FM_ST_RESOURCE_EXHAUSTED},
    {"FM_ST_RESOURCE_NOT_READY", FM_ST_RESOURCE_NOT_READY},
    {"FM_ST_PARTITION_EXISTS", FM_ST_PARTITION_EXISTS},
    {"FM_ST_PARTITION_ID_IN_USE", FM_ST_PARTITION_ID_IN_USE},
    {"FM_ST_PARTITION_ID_NOT_IN_USE", FM_ST_PARTITION_ID_NOT_IN_USE},
    {"FM_ST_PARTITION_NAME_IN_USE", FM_ST_PARTITION_NAME_IN_USE},
    {"FM_ST_PARTITION_NAME_NOT_IN_USE", FM_ST_PARTITION_NAME_NOT_IN_USE},
    {"FM_ST_PARTITION_ID_NAME_MISMATCH", FM_ST_PARTITION_ID_NAME_MISMATCH},
    {"FM_ST_NOT_READY", FM_ST_NOT_READY},
    {"FM_ST_RESOURCE_USED_IN_THIS_PARTITION", FM_ST_RESOURCE_USED_IN_THIS_PARTITION},
    {"FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION", FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION},
    {"FM_ST_PARTITION_MISWIRED_TRUNKS", FM_ST_PARTITION_MISWIRED_TRUNKS},
    {"FM_ST_PARTITION_INSUFFICIENT_TRUNKS", FM_ST_PARTITION_INSUFFICIENT_TRUNKS},
    {"FM_ST_PARTITION_MISSING_SWITCHES", FM_ST_PARTITION_MISSING_SWITCHES},
    {"FM_ST_PARTITION_NETWORK_CONFIG_ERROR", FM_ST_PARTITION_NETWORK_CONFIG_ERROR},
    {"FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR", FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR},
    {"fmFabricPartitionList_version", (long)fmFabricPartitionList_version},
    {"fmActivatedFabricPartitionList_version", (long)fmActivatedFabricPartitionList_version},
    {"fmNvlinkFailedDevices_version", (long)fmNvlinkFailedDevices_version},
    {"fmUnsupportedFabricPartitionList_version", (long)fmUnsupportedFabricPartitionList_version},
};

long fakeFmLayout(const char *key) {
    if (key == NULL) return LONG_MIN;
    for (size_t i = 0; i < sizeof(LAYOUT) / sizeof(LAYOUT[0]); i++)
        if (strcmp(LAYOUT[i].key, key) == 0) return LAYOUT[i].value;
    return LONG_MIN;
}
