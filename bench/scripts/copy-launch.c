// Build: cc -O2 -o copy-launch copy-launch.c -ldl   (no CUDA headers or toolkit: libcuda.so.1 is
// opened at run time; cuMemcpyBatchAsync_v2 needs a CUDA 13 driver.)
// Run on a machine with two GPUs: ./copy-launch [DEV]  (DEV: the receiving GPU, default 1; 0 for
// the same-GPU figures). A parent process allocates 1 GiB (CYCLE: 8 GiB) on GPU0 and passes its
// IPC handle; the child maps it on DEV and copies out of it. CYCLE=1: only 1 GiB copies, the
// same buffers vs cycling through 8 GiB; LARGE=1: also 16 MiB / 256 MiB / 1 GiB split in 1-16
// chunks, separate calls vs one batch. Cited by docs/benchmarks.md ("Measured first with a C
// program over the driver", and the cuStreamWriteValue32 row of "Measured and dropped").
//
// Driver-call cost experiment: per-copy launch cost of cuMemcpyAsync vs
// cuMemcpyBatchAsync over an IPC mapping (GPU0 memory read on GPU1), and
// completion seen through cuEventQuery vs a cuStreamWriteValue32 flag in
// host memory.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
typedef int CUresult; typedef int CUdevice; typedef void* CUcontext; typedef void* CUstream; typedef void* CUevent;
typedef unsigned long long CUdeviceptr;
typedef struct { char r[64]; } CUipcMemHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct { int srcAccessOrder; CUmemLocation srcLocHint; CUmemLocation dstLocHint; unsigned flags; } CUmemcpyAttributes;
#define F(name, sym, ...) static CUresult (*name)(__VA_ARGS__);
static void* lib;
F(cuInit, "cuInit", unsigned)
F(cuDeviceGet,"",CUdevice*,int)
F(cuDevicePrimaryCtxRetain,"",CUcontext*,CUdevice)
F(cuCtxSetCurrent,"",CUcontext)
F(cuMemAlloc,"",CUdeviceptr*,size_t)
F(cuIpcGetMemHandle,"",CUipcMemHandle*,CUdeviceptr)
F(cuIpcOpenMemHandle,"",CUdeviceptr*,CUipcMemHandle,unsigned)
F(cuStreamCreate,"",CUstream*,unsigned)
F(cuMemcpyAsync,"",CUdeviceptr,CUdeviceptr,size_t,CUstream)
F(cuEventCreate,"",CUevent*,unsigned)
F(cuEventRecord,"",CUevent,CUstream)
F(cuEventQuery,"",CUevent)
F(cuEventSynchronize,"",CUevent)
F(cuStreamSynchronize,"",CUstream)
F(cuMemHostAlloc,"",void**,size_t,unsigned)
F(cuMemHostGetDevicePointer,"",CUdeviceptr*,void*,unsigned)
F(cuStreamWriteValue32,"",CUstream,CUdeviceptr,uint32_t,unsigned)
F(cuMemcpyBatchAsync,"",CUdeviceptr*,CUdeviceptr*,size_t*,size_t,CUmemcpyAttributes*,size_t*,size_t,CUstream)
F(cuLaunchHostFunc,"",CUstream,void(*)(void*),void*)
static void* need(const char* n){ void* p=dlsym(lib,n); if(!p){fprintf(stderr,"missing %s\n",n); exit(2);} return p; }
#define L(v,n) *(void**)&v = need(n)
#define CK(x) do{ CUresult r_=(x); if(r_){fprintf(stderr,"%s:%d %s = %d\n",__FILE__,__LINE__,#x,r_); exit(3);} }while(0)
static double now(){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e6+t.tv_nsec/1e3; }
static void load(){
  lib=dlopen("libcuda.so.1",RTLD_NOW); if(!lib){fprintf(stderr,"%s\n",dlerror()); exit(2);}
  L(cuInit,"cuInit"); L(cuDeviceGet,"cuDeviceGet"); L(cuDevicePrimaryCtxRetain,"cuDevicePrimaryCtxRetain");
  L(cuCtxSetCurrent,"cuCtxSetCurrent"); L(cuMemAlloc,"cuMemAlloc_v2"); L(cuIpcGetMemHandle,"cuIpcGetMemHandle");
  L(cuIpcOpenMemHandle,"cuIpcOpenMemHandle_v2"); L(cuStreamCreate,"cuStreamCreate"); L(cuMemcpyAsync,"cuMemcpyAsync");
  L(cuEventCreate,"cuEventCreate"); L(cuEventRecord,"cuEventRecord"); L(cuEventQuery,"cuEventQuery");
  L(cuEventSynchronize,"cuEventSynchronize"); L(cuStreamSynchronize,"cuStreamSynchronize");
  L(cuMemHostAlloc,"cuMemHostAlloc"); L(cuMemHostGetDevicePointer,"cuMemHostGetDevicePointer_v2");
  L(cuStreamWriteValue32,"cuStreamWriteValue32_v2"); L(cuMemcpyBatchAsync,"cuMemcpyBatchAsync_v2");
  L(cuLaunchHostFunc,"cuLaunchHostFunc");
}
static CUcontext ctxOn(int d){ CUdevice dev; CUcontext c; CK(cuDeviceGet(&dev,d)); CK(cuDevicePrimaryCtxRetain(&c,dev)); CK(cuCtxSetCurrent(c)); return c; }
#define MiB (1u<<20)
int main(int argc,char**argv){
  int devB = argc>1 ? atoi(argv[1]) : 1;
  int p2c[2], c2p[2]; pipe(p2c); pipe(c2p);
  pid_t pid=fork();
  if(pid){ // parent: owner of the source on GPU0
    load(); CK(cuInit(0)); ctxOn(0);
    CUdeviceptr src; CK(cuMemAlloc(&src, getenv("CYCLE") ? (size_t)8<<30 : (size_t)1<<30)); CUipcMemHandle h; CK(cuIpcGetMemHandle(&h,src));
    write(p2c[1],&h,sizeof h); char b; read(c2p[0],&b,1); waitpid(pid,0,0); return 0;
  }
  load(); CK(cuInit(0)); ctxOn(devB);
  CUipcMemHandle h; read(p2c[0],&h,sizeof h);
  CUdeviceptr src; CK(cuIpcOpenMemHandle(&src,h,1));
  CUdeviceptr dst; CK(cuMemAlloc(&dst,64*MiB));
  CUstream s; CK(cuStreamCreate(&s,1)); CUdeviceptr bigsrc = src;
  CUevent e0,e1; CK(cuEventCreate(&e0,2)); CK(cuEventCreate(&e1,2)); // disable timing
  volatile uint32_t* flag; CK(cuMemHostAlloc((void**)&flag,4096,0x02|0x01)); CUdeviceptr dflag; CK(cuMemHostGetDevicePointer(&dflag,(void*)flag,0));
  *flag=0;
  CUmemcpyAttributes at; memset(&at,0,sizeof at); at.srcAccessOrder=1; at.srcLocHint.type=1; at.srcLocHint.id=devB; at.dstLocHint.type=1; at.dstLocHint.id=devB;
  size_t attrIdx=0;
  if (getenv("CYCLE")) goto cycle;
  // warm
  for(int i=0;i<200;i++) CK(cuMemcpyAsync(dst,src,MiB,s)); CK(cuStreamSynchronize(s));
  for (int n=1;n<=8;n*=2){
    // launch cost, n separate calls vs 1 batch of n (1 MiB each), and throughput with one event per group
    int R=2000; double t0,t1; double callA=0, callB=0;
    CUdeviceptr ds[8], ss[8]; size_t sz[8];
    for(int k=0;k<n;k++){ ds[k]=dst+k*MiB; ss[k]=src+k*MiB; sz[k]=MiB; }
    CK(cuStreamSynchronize(s));
    t0=now(); for(int r=0;r<R;r++){ double a=now(); for(int k=0;k<n;k++) CK(cuMemcpyAsync(ds[k],ss[k],MiB,s)); callA+=now()-a; CK(cuEventRecord(e1,s)); if(r%4==3) CK(cuEventSynchronize(e1)); } CK(cuStreamSynchronize(s)); t1=now();
    double bwA = (double)R*n*MiB/((t1-t0)*1e3);
    CK(cuStreamSynchronize(s));
    t0=now(); for(int r=0;r<R;r++){ double a=now(); CK(cuMemcpyBatchAsync(ds,ss,sz,n,&at,&attrIdx,1,s)); callB+=now()-a; CK(cuEventRecord(e1,s)); if(r%4==3) CK(cuEventSynchronize(e1)); } CK(cuStreamSynchronize(s)); t1=now();
    double bwB = (double)R*n*MiB/((t1-t0)*1e3);
    printf("n=%d 1MiB: separate calls %.2f us/copy (%.1f GB/s) | batch %.2f us/call = %.2f us/copy (%.1f GB/s)\n", n, callA/R/n, bwA, callB/R, callB/R/n, bwB);
  }
  // 1 MiB launch cost in a CPU-bound loop: keep 8 in flight, event per copy
  // 8 B latency: copy + event + query spin vs copy + writeValue flag spin
  for (int round=0; round<2; round++){
    int R=5000; double lat=0, call=0, q=0; long nq=0;
    for(int r=0;r<R;r++){ double a=now(); CK(cuMemcpyAsync(dst,src,8,s)); CK(cuEventRecord(e0,s)); double b=now(); call+=b-a; CUresult x; while((x=cuEventQuery(e0))==600) nq++; CK(x); lat+=now()-a; }
    printf("8B copy+record+query-spin: %.2f us (launch+record %.2f us, %.1f queries)\n", lat/R, call/R, (double)nq/R);
    lat=0; call=0;
    for(int r=0;r<R;r++){ uint32_t v=r+1+round*R; double a=now(); CK(cuMemcpyAsync(dst,src,8,s)); CK(cuStreamWriteValue32(s,dflag,v,0)); double b=now(); call+=b-a; while(*flag!=v){} lat+=now()-a; }
    printf("8B copy+writeValue32+flag-spin: %.2f us (launch+write %.2f us)\n", lat/R, call/R);
    lat=0;
    for(int r=0;r<R;r++){ double a=now(); CK(cuEventRecord(e0,s)); lat+=now()-a; }
    double rec=lat/R; lat=0;
    for(int r=0;r<R;r++){ double a=now(); CK(cuStreamWriteValue32(s,dflag,7,0)); lat+=now()-a; }
    CK(cuStreamSynchronize(s));
    double wv=lat/R; lat=0;
    for(int r=0;r<R;r++){ double a=now(); cuEventQuery(e0); lat+=now()-a; }
    printf("call costs: eventRecord %.2f us, writeValue32 %.2f us, eventQuery(done) %.2f us\n", rec, wv, lat/R);
    // batch of one 8 B
    lat=0; call=0; CUdeviceptr d1=dst, s1=src; size_t z1=8;
    for(int r=0;r<R;r++){ uint32_t v=100000+r+round*R; double a=now(); CK(cuMemcpyBatchAsync(&d1,&s1,&z1,1,&at,&attrIdx,1,s)); CK(cuStreamWriteValue32(s,dflag,v,0)); double b=now(); call+=b-a; while(*flag!=v){} lat+=now()-a; }
    printf("8B batch(1)+writeValue32+flag-spin: %.2f us (launch+write %.2f us)\n", lat/R, call/R);
  }
  // Streaming model: keep W=8 1 MiB copies in flight, flag per copy, CPU issues as completions arrive
  for (int mode=0; mode<2; mode++){
    int N=20000, W=8; uint32_t issued=0, seen=0; double t0=now();
    while(seen<(uint32_t)N){
      while(issued<(uint32_t)N && issued-seen<(uint32_t)W){
        CUdeviceptr d=dst+(issued%W)*MiB, sr=src+(issued%W)*MiB; size_t z=MiB;
        if(mode==0) CK(cuMemcpyAsync(d,sr,MiB,s)); else CK(cuMemcpyBatchAsync(&d,&sr,&z,1,&at,&attrIdx,1,s));
        issued++; CK(cuStreamWriteValue32(s,dflag,issued+1000000*(mode+1),0));
      }
      uint32_t f=*flag; if(f>=1000000*(mode+1)) seen=f-1000000*(mode+1);
    }
    double t=now()-t0; printf("stream W=8 1MiB %s + writeValue: %.1f GB/s (%.2f us/copy)\n", mode?"batch(1)":"memcpyAsync", (double)N*MiB/(t*1e3), t/N);
  }

cycle:
  if (getenv("CYCLE")) {
    // 1 GiB copies: the same buffers every time vs cycling through 8 GiB on each side
    size_t G = (size_t)1 << 30; CUdeviceptr big; CK(cuMemAlloc(&big, 8*G));
    static CUresult (*elapsed)(float*,CUevent,CUevent); *(void**)&elapsed=need("cuEventElapsedTime_v2");
    CUevent t0e,t1e; CK(cuEventCreate(&t0e,0)); CK(cuEventCreate(&t1e,0));
    for (int rep=0; rep<3; rep++) for (int mode=0; mode<3; mode++) {
      CK(cuStreamSynchronize(s)); CK(cuEventRecord(t0e,s));
      for (int i=0;i<8;i++){ size_t o = mode==0 ? 0 : i*G; CK(cuMemcpyAsync(big+(mode==2?0:o), bigsrc+(mode==1?0:o), G, s)); }
      CK(cuEventRecord(t1e,s)); CK(cuEventSynchronize(t1e)); float ms; CK(elapsed(&ms,t0e,t1e));
      printf("1 GiB x8 %s: %.1f GB/s\n", mode==0?"same buffers      ":mode==1?"dst cycles 8 GiB  ":"src cycles 8 GiB  ", 8.0*G/(ms*1e6));
    }
  }
  if (getenv("LARGE")) {
    CUdeviceptr bsrc=src, bdst; CK(cuMemAlloc(&bdst,(size_t)1<<30));
    CUevent t0e,t1e; CK(cuEventCreate(&t0e,0)); CK(cuEventCreate(&t1e,0));
    float (*dummy)=0; (void)dummy;
    static CUresult (*elapsed)(float*,CUevent,CUevent); *(void**)&elapsed=need("cuEventElapsedTime_v2");
    size_t sizes[]={16u<<20, 256u<<20, (size_t)1<<30};
    for(int si=0;si<3;si++){ size_t S=sizes[si]; int reps = S>=(256u<<20)? 10: 100;
      for(int k=1;k<=16;k*=2){
        CUdeviceptr ds[16], ss[16]; size_t sz[16]; for(int j=0;j<k;j++){ ds[j]=bdst+j*(S/k); ss[j]=bsrc+j*(S/k); sz[j]=S/k; }
        for(int mode=0;mode<(k==1?1:2);mode++){
          CK(cuStreamSynchronize(s)); CK(cuEventRecord(t0e,s));
          for(int r=0;r<reps;r++){ if(mode==0 && k==1) CK(cuMemcpyAsync(bdst,bsrc,S,s)); else if(mode==0) { for(int j=0;j<k;j++) CK(cuMemcpyAsync(ds[j],ss[j],sz[j],s)); } else CK(cuMemcpyBatchAsync(ds,ss,sz,k,&at,&attrIdx,1,s)); }
          CK(cuEventRecord(t1e,s)); CK(cuEventSynchronize(t1e)); float ms; CK(elapsed(&ms,t0e,t1e));
          printf("%4zu MiB in %2d chunks %s: %.1f GB/s\n", S>>20, k, mode?"batch   ":"separate", (double)S*reps/(ms*1e6));
        }
      }
    }
  }
  write(c2p[1],"x",1); return 0;
}
