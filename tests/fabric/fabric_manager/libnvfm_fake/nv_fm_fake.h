/*
 * gpucaas test double of NVIDIA's Fabric Manager API library (libnvfm).
 *
 * Written for gpucaas from the layout and semantics the Fabric Manager user
 * guide documents for its SDK (nv_fm_types.h / nv_fm_agent.h): same type
 * names, field order, array bounds, version macros, return codes and function
 * signatures, so that the ctypes binding in services/fabric/fabric_manager/nvfm.py
 * can be exercised against it. It is not NVIDIA's header.
 *
 * Beyond the SDK, the library exports fakeFm* control functions the tests use
 * to play Fabric Manager events (stop/start/restart, NVLink failures) and
 * fakeFmLayout() to report sizeof/offsetof of every structure field.
 */
#ifndef GPUCAAS_NV_FM_FAKE_H
#define GPUCAAS_NV_FM_FAKE_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- return codes (fmReturn_t) ------------------------------------------------ */
typedef enum fmReturn_enum {
    FM_ST_SUCCESS = 0,
    FM_ST_BADPARAM = -1,
    FM_ST_GENERIC_ERROR = -2,
    FM_ST_NOT_SUPPORTED = -3,
    FM_ST_UNINITIALIZED = -4,
    FM_ST_TIMEOUT = -5,
    FM_ST_VERSION_MISMATCH = -6,
    FM_ST_IN_USE = -7,
    FM_ST_NOT_CONFIGURED = -8,
    FM_ST_CONNECTION_NOT_VALID = -9,
    FM_ST_NVLINK_ERROR = -10,
    /* FM 550+ (nv_fm_types.h of those releases): more codes after -10 */
    FM_ST_RESOURCE_BAD = -11,
    FM_ST_RESOURCE_IN_USE = -12,
    FM_ST_RESOURCE_NOT_IN_USE = -13,
    FM_ST_RESOURCE_EXHAUSTED = -14,
    FM_ST_RESOURCE_NOT_READY = -15,
    FM_ST_PARTITION_EXISTS = -16,
    FM_ST_PARTITION_ID_IN_USE = -17,
    FM_ST_PARTITION_ID_NOT_IN_USE = -18,
    FM_ST_PARTITION_NAME_IN_USE = -19,
    FM_ST_PARTITION_NAME_NOT_IN_USE = -20,
    FM_ST_PARTITION_ID_NAME_MISMATCH = -21,
    FM_ST_NOT_READY = -22,
    FM_ST_RESOURCE_USED_IN_THIS_PARTITION = -23,
    FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION = -24,
    FM_ST_PARTITION_MISWIRED_TRUNKS = -25,
    FM_ST_PARTITION_INSUFFICIENT_TRUNKS = -26,
    FM_ST_PARTITION_MISSING_SWITCHES = -27,
    FM_ST_PARTITION_NETWORK_CONFIG_ERROR = -28,
    FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR = -29
} fmReturn_t;

typedef void *fmHandle_t;
typedef unsigned int fmFabricPartitionId_t;

/* ---- limits -------------------------------------------------------------------- */
#define FM_MAX_STR_LENGTH 256
#define FM_UUID_BUFFER_SIZE 80
#define FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define FM_MAX_NUM_GPUS 16
#define FM_MAX_NUM_NVSWITCHES 12
#define FM_MAX_FABRIC_PARTITIONS 64
#define FM_MAX_NUM_NVLINK_PORTS 64
#define FM_CMD_PORT_NUMBER 6666

/* A struct's version word: its size in the low 24 bits, the version above. */
#define MAKE_FM_PARAM_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((ver) << 24U)))

/* ---- structures ---------------------------------------------------------------- */
typedef struct {
    unsigned int version;
    char addressInfo[FM_MAX_STR_LENGTH];  /* "ip", "ip:port" or a unix socket path */
    unsigned int timeoutMs;
    unsigned int addressIsUnixSocket;
} fmConnectParams_v1;
/* FM 550+: addressType (nvFmApiAddrTypes) added; addressIsUnixSocket deprecated. */
enum nvFmApiAddrTypes {
    NV_FM_API_ADDR_TYPE_UNKNOWN = 0,
    NV_FM_API_ADDR_TYPE_INET = 1,
    NV_FM_API_ADDR_TYPE_UNIX = 2,
    NV_FM_API_ADDR_TYPE_VSOCK = 3
};
typedef struct {
    unsigned int version;
    char addressInfo[FM_MAX_STR_LENGTH];
    unsigned int timeoutMs;
    unsigned int addressIsUnixSocket;
    enum nvFmApiAddrTypes addressType;
} fmConnectParams_v2;
#define fmConnectV1Params_version1 MAKE_FM_PARAM_VERSION(fmConnectParams_v1, 1)
#define fmConnectV2Params_version2 MAKE_FM_PARAM_VERSION(fmConnectParams_v2, 2)
/* Built with -DNVFM_FAKE_API_V2 the double is a 550+ library (expects v2 params);
 * without, a 525/535 one (expects v1), as NVIDIA's headers of those releases define. */
#ifdef NVFM_FAKE_API_V2
typedef fmConnectParams_v2 fmConnectParams_t;
#define fmConnectParams_version fmConnectV2Params_version2
#else
typedef fmConnectParams_v1 fmConnectParams_t;
#define fmConnectParams_version fmConnectV1Params_version1
#endif

typedef struct {
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int function;
} fmPciDevice_t;

typedef struct {
    unsigned int physicalId;
    char uuid[FM_UUID_BUFFER_SIZE];
    char pciBusId[FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int numNvLinksAvailable;
    unsigned int maxNumNvLinks;
    unsigned int nvlinkLineRateMBps;
} fmFabricPartitionGpuInfo_t;

typedef struct {
    fmFabricPartitionId_t partitionId;
    unsigned int isActive;
    unsigned int numGpus;
    fmFabricPartitionGpuInfo_t gpuInfo[FM_MAX_NUM_GPUS];
} fmFabricPartitionInfo_t;

typedef struct {
    unsigned int version;
    unsigned int numPartitions;
    unsigned int maxNumPartitions;
    fmFabricPartitionInfo_t partitionInfo[FM_MAX_FABRIC_PARTITIONS];
} fmFabricPartitionList_v2;
typedef fmFabricPartitionList_v2 fmFabricPartitionList_t;
#define fmFabricPartitionList_version MAKE_FM_PARAM_VERSION(fmFabricPartitionList_v2, 1)

typedef struct {
    unsigned int version;
    unsigned int numPartitions;
    fmFabricPartitionId_t partitionIds[FM_MAX_FABRIC_PARTITIONS];
} fmActivatedFabricPartitionList_v1;
typedef fmActivatedFabricPartitionList_v1 fmActivatedFabricPartitionList_t;
#define fmActivatedFabricPartitionList_version \
    MAKE_FM_PARAM_VERSION(fmActivatedFabricPartitionList_v1, 1)

typedef struct {
    char uuid[FM_UUID_BUFFER_SIZE];
    char pciBusId[FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int numPorts;
    unsigned int portNum[FM_MAX_NUM_NVLINK_PORTS];
} fmNvlinkFailedDeviceInfo_t;

typedef struct {
    unsigned int version;
    unsigned int numGpus;
    unsigned int numSwitches;
    fmNvlinkFailedDeviceInfo_t gpuInfo[FM_MAX_NUM_GPUS];
    fmNvlinkFailedDeviceInfo_t switchInfo[FM_MAX_NUM_NVSWITCHES];
} fmNvlinkFailedDevices_v1;
typedef fmNvlinkFailedDevices_v1 fmNvlinkFailedDevices_t;
#define fmNvlinkFailedDevices_version MAKE_FM_PARAM_VERSION(fmNvlinkFailedDevices_v1, 1)

typedef struct {
    fmFabricPartitionId_t partitionId;
    unsigned int numGpus;
    unsigned int gpuPhysicalIds[FM_MAX_NUM_GPUS];
} fmUnsupportedFabricPartitionInfo_t;

typedef struct {
    unsigned int version;
    unsigned int numPartitions;
    fmUnsupportedFabricPartitionInfo_t partitionInfo[FM_MAX_FABRIC_PARTITIONS];
} fmUnsupportedFabricPartitionList_v1;
typedef fmUnsupportedFabricPartitionList_v1 fmUnsupportedFabricPartitionList_t;
#define fmUnsupportedFabricPartitionList_version \
    MAKE_FM_PARAM_VERSION(fmUnsupportedFabricPartitionList_v1, 1)

/* ---- the SDK calls ------------------------------------------------------------- */
fmReturn_t fmLibInit(void);
fmReturn_t fmLibShutdown(void);
fmReturn_t fmConnect(fmConnectParams_t *connectParams, fmHandle_t *pFmHandle);
fmReturn_t fmDisconnect(fmHandle_t pFmHandle);
fmReturn_t fmGetSupportedFabricPartitions(fmHandle_t pFmHandle,
                                          fmFabricPartitionList_t *pFmFabricPartition);
fmReturn_t fmActivateFabricPartition(fmHandle_t pFmHandle, fmFabricPartitionId_t partitionId);
fmReturn_t fmDeactivateFabricPartition(fmHandle_t pFmHandle, fmFabricPartitionId_t partitionId);
fmReturn_t fmSetActivatedFabricPartitions(fmHandle_t pFmHandle,
                                          fmActivatedFabricPartitionList_t *pList);
fmReturn_t fmGetNvlinkFailedDevices(fmHandle_t pFmHandle,
                                    fmNvlinkFailedDevices_t *pFmNvlinkFailedDevices);
fmReturn_t fmGetUnsupportedFabricPartitions(fmHandle_t pFmHandle,
                                            fmUnsupportedFabricPartitionList_t *pList);

/* ---- test controls (not part of the SDK) ---------------------------------------- */
void fakeFmReset(void);                       /* running, ready, nothing active, no failures */
void fakeFmStop(void);                        /* process gone: connections invalid */
void fakeFmStart(int resiliency);             /* back; forgets active set; waits for list if resiliency */
int fakeFmSetGpu(unsigned int physicalId, const char *pciBusId);
int fakeFmInjectGpuFailure(unsigned int physicalId, unsigned int port);
int fakeFmClearGpuFailure(unsigned int physicalId);
int fakeFmInjectSwitchFailure(const char *pciBusId, unsigned int port);
int fakeFmIsActive(unsigned int partitionId); /* 1/0, -1 for an unknown id */
int fakeFmAwaitingList(void);
void fakeFmSetH100(int on);                   /* H100 semantics: empty pciBusId/UUID, no degradation lists */
void fakeFmSetRestartTimeoutMs(unsigned int ms); /* restart mode: exit when no list within ms (60000) */
int fakeFmRunning(void);
void fakeFmStall(int ms);                     /* every SDK call waits ms first; <0: until fakeFmStall(0) */
int fakeFmStalledCalls(void);                 /* SDK calls waiting in a stall now */
int fakeFmLastConnectVersion(void);           /* 1 or 2: the params version of the last fmConnect */
int fakeFmFailNext(const char *function, int rc); /* the next call of function returns rc */
const char *fakeFmLastAddress(void);          /* addressInfo of the last fmConnect */
unsigned int fakeFmLastTimeoutMs(void);
int fakeFmLastAddressIsUnixSocket(void);
/* "T" -> sizeof(T), "T.f" -> offsetof(T, f), a constant's name -> its value;
 * LONG_MIN for an unknown key */
long fakeFmLayout(const char *key);

#ifdef __cplusplus
}
#endif
#endif /* GPUCAAS_NV_FM_FAKE_H */
