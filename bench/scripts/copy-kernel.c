// Build: cc -O2 -o copy-kernel copy-kernel.c -ldl   (no CUDA headers or toolkit: libcuda.so.1 is
// opened at run time and the kernel is PTX, JIT-compiled by the driver.)
// Run on a machine with two GPUs: ./copy-kernel [DEV]  (DEV: the receiving GPU, default 1). A
// parent process allocates on GPU0 and passes its IPC handle; the child maps it on DEV and copies
// 8 B / 64 B / 4 KiB out of it, two rounds each, then times cuEventQuery on an incomplete event.
// Cited by docs/benchmarks.md ("Measured and dropped": the one-warp PTX kernel and the
// cuEventQuery rows).
//
// Small-message latency: copy engine (cuMemcpyAsync) vs a one-warp PTX copy
// kernel, completion by cuEventQuery vs a flag the kernel writes to mapped
// host memory. GPU0 memory (IPC) read on GPU1, as an RGET does.
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
typedef void* CUmodule; typedef void* CUfunction;
typedef unsigned long long CUdeviceptr;
typedef struct { char r[64]; } CUipcMemHandle;
#define F(name, ...) static CUresult (*name)(__VA_ARGS__);
static void* lib;
F(cuInit, unsigned) F(cuDeviceGet,CUdevice*,int) F(cuDevicePrimaryCtxRetain,CUcontext*,CUdevice) F(cuCtxSetCurrent,CUcontext)
F(cuMemAlloc,CUdeviceptr*,size_t) F(cuIpcGetMemHandle,CUipcMemHandle*,CUdeviceptr) F(cuIpcOpenMemHandle,CUdeviceptr*,CUipcMemHandle,unsigned)
F(cuStreamCreate,CUstream*,unsigned) F(cuMemcpyAsync,CUdeviceptr,CUdeviceptr,size_t,CUstream)
F(cuEventCreate,CUevent*,unsigned) F(cuEventRecord,CUevent,CUstream) F(cuEventQuery,CUevent) F(cuStreamSynchronize,CUstream)
F(cuMemHostAlloc,void**,size_t,unsigned) F(cuMemHostGetDevicePointer,CUdeviceptr*,void*,unsigned)
F(cuModuleLoadData,CUmodule*,const void*) F(cuModuleGetFunction,CUfunction*,CUmodule,const char*)
F(cuLaunchKernel,CUfunction,unsigned,unsigned,unsigned,unsigned,unsigned,unsigned,unsigned,CUstream,void**,void**)
F(cuMemcpyHtoD,CUdeviceptr,const void*,size_t) F(cuMemcpyDtoH,void*,CUdeviceptr,size_t)
static void* need(const char* n){ void* p=dlsym(lib,n); if(!p){fprintf(stderr,"missing %s\n",n); exit(2);} return p; }
#define L(v,n) *(void**)&v = need(n)
#define CK(x) do{ CUresult r_=(x); if(r_){fprintf(stderr,"%s:%d %s = %d\n",__FILE__,__LINE__,#x,r_); exit(3);} }while(0)
static double now(){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e6+t.tv_nsec/1e3; }
static const char* PTX =
".version 7.0\n.target sm_70\n.address_size 64\n"
".visible .entry k_copy(.param .u64 p_dst, .param .u64 p_src, .param .u64 p_n, .param .u64 p_flag, .param .u32 p_val)\n{\n"
" .reg .pred %p<3>;\n .reg .u16 %rs<2>;\n .reg .u32 %r<4>;\n .reg .u64 %rd<10>;\n"
" ld.param.u64 %rd1, [p_dst];\n ld.param.u64 %rd2, [p_src];\n ld.param.u64 %rd3, [p_n];\n ld.param.u64 %rd4, [p_flag];\n ld.param.u32 %r1, [p_val];\n"
" mov.u32 %r2, %tid.x;\n cvt.u64.u32 %rd5, %r2;\n"
"L1:\n setp.ge.u64 %p1, %rd5, %rd3;\n @%p1 bra L2;\n add.u64 %rd6, %rd2, %rd5;\n ld.global.u8 %rs1, [%rd6];\n add.u64 %rd7, %rd1, %rd5;\n st.global.u8 [%rd7], %rs1;\n add.u64 %rd5, %rd5, 32;\n bra L1;\n"
"L2:\n setp.eq.u64 %p2, %rd4, 0;\n @%p2 bra L3;\n bar.sync 0;\n setp.ne.u32 %p2, %r2, 0;\n @%p2 bra L3;\n membar.sys;\n st.volatile.global.u32 [%rd4], %r1;\n"
"L3:\n ret;\n}\n";
static void load(){
  lib=dlopen("libcuda.so.1",RTLD_NOW); if(!lib){fprintf(stderr,"%s\n",dlerror()); exit(2);}
  L(cuInit,"cuInit"); L(cuDeviceGet,"cuDeviceGet"); L(cuDevicePrimaryCtxRetain,"cuDevicePrimaryCtxRetain");
  L(cuCtxSetCurrent,"cuCtxSetCurrent"); L(cuMemAlloc,"cuMemAlloc_v2"); L(cuIpcGetMemHandle,"cuIpcGetMemHandle");
  L(cuIpcOpenMemHandle,"cuIpcOpenMemHandle_v2"); L(cuStreamCreate,"cuStreamCreate"); L(cuMemcpyAsync,"cuMemcpyAsync");
  L(cuEventCreate,"cuEventCreate"); L(cuEventRecord,"cuEventRecord"); L(cuEventQuery,"cuEventQuery");
  L(cuStreamSynchronize,"cuStreamSynchronize"); L(cuMemHostAlloc,"cuMemHostAlloc"); L(cuMemHostGetDevicePointer,"cuMemHostGetDevicePointer_v2");
  L(cuModuleLoadData,"cuModuleLoadData"); L(cuModuleGetFunction,"cuModuleGetFunction"); L(cuLaunchKernel,"cuLaunchKernel");
  L(cuMemcpyHtoD,"cuMemcpyHtoD_v2"); L(cuMemcpyDtoH,"cuMemcpyDtoH_v2");
}
static CUcontext ctxOn(int d){ CUdevice dev; CUcontext c; CK(cuDeviceGet(&dev,d)); CK(cuDevicePrimaryCtxRetain(&c,dev)); CK(cuCtxSetCurrent(c)); return c; }
static int cmp(const void*a,const void*b){ double x=*(double*)a,y=*(double*)b; return x<y?-1:x>y; }
static double med(double*v,int n){ qsort(v,n,sizeof *v,cmp); return v[n/2]; }
int main(int argc,char**argv){
  int devB = argc>1 ? atoi(argv[1]) : 1;
  int p2c[2], c2p[2]; pipe(p2c); pipe(c2p);
  pid_t pid=fork();
  if(pid){ load(); CK(cuInit(0)); ctxOn(0);
    CUdeviceptr src; CK(cuMemAlloc(&src, 1<<20)); unsigned char pat[64]; for(int i=0;i<64;i++) pat[i]=i*7+1; CK(cuMemcpyHtoD(src,pat,64));
    CUipcMemHandle h; CK(cuIpcGetMemHandle(&h,src));
    write(p2c[1],&h,sizeof h); char b; read(c2p[0],&b,1); waitpid(pid,0,0); return 0; }
  load(); CK(cuInit(0)); ctxOn(devB);
  CUipcMemHandle h; read(p2c[0],&h,sizeof h);
  CUdeviceptr src; CK(cuIpcOpenMemHandle(&src,h,1));
  CUdeviceptr dst; CK(cuMemAlloc(&dst,1<<20));
  CUstream s; CK(cuStreamCreate(&s,1));
  CUevent e; CK(cuEventCreate(&e,2));
  volatile uint32_t* flag; CK(cuMemHostAlloc((void**)&flag,4096,0x02|0x01)); CUdeviceptr dflag; CK(cuMemHostGetDevicePointer(&dflag,(void*)flag,0)); *flag=0;
  CUmodule m; double t0=now(); CUresult lr=cuModuleLoadData(&m,PTX); double tl=now()-t0;
  if(lr){ fprintf(stderr,"cuModuleLoadData = %d\n",lr); return 3; }
  CUfunction k; CK(cuModuleGetFunction(&k,m,"k_copy"));
  printf("module load (PTX JIT) %.0f us\n", tl);
  enum { R=5000 }; static double v[R], c[R]; int sizes[]={8,64,4096};
  for(int si=0;si<3;si++){ size_t n=sizes[si];
    for(int round=0; round<2; round++){
      // A: copy engine + event
      for(int r=0;r<R;r++){ double a=now(); CK(cuMemcpyAsync(dst,src,n,s)); CK(cuEventRecord(e,s)); c[r]=now()-a; CUresult x; while((x=cuEventQuery(e))==600){} CK(x); v[r]=now()-a; }
      double A=med(v,R), Ac=med(c,R);
      // B: kernel + event
      CUdeviceptr z=0; uint32_t val=0;
      void* pa[]={&dst,&src,&n,&z,&val};
      for(int r=0;r<R;r++){ double a=now(); CK(cuLaunchKernel(k,1,1,1,32,1,1,0,s,pa,0)); CK(cuEventRecord(e,s)); c[r]=now()-a; CUresult x; while((x=cuEventQuery(e))==600){} CK(x); v[r]=now()-a; }
      double B=med(v,R), Bc=med(c,R);
      // C: kernel writes the flag
      void* pc[]={&dst,&src,&n,&dflag,&val};
      for(int r=0;r<R;r++){ val=1+r+round*R+si*4*R; double a=now(); CK(cuLaunchKernel(k,1,1,1,32,1,1,0,s,pc,0)); c[r]=now()-a; while(*flag!=val){} v[r]=now()-a; }
      double C=med(v,R), Cc=med(c,R);
      printf("%5zu B: copy engine+event %.2f us (launch+record %.2f) | kernel+event %.2f (%.2f) | kernel+flag %.2f (launch %.2f)\n", n, A, Ac, B, Bc, C, Cc);
    }
    unsigned char back[64]={0}; CK(cuStreamSynchronize(s)); CK(cuMemcpyDtoH(back,dst,n<64?n:64)); int ok=1; for(size_t i=0;i<(n<64?n:64);i++) if(back[i]!=(unsigned char)(i*7+1)) ok=0; printf("  bytes %s\n", ok?"correct":"WRONG");
  }
  // incomplete-event query cost
  { double q=0; int nq=0; CK(cuMemcpyAsync(dst,src,1<<20,s)); for(int i=0;i<200;i++) CK(cuMemcpyAsync(dst,src,1<<20,s)); CK(cuEventRecord(e,s));
    while(1){ double a=now(); CUresult x=cuEventQuery(e); q+=now()-a; nq++; if(x!=600) break; } printf("cuEventQuery while incomplete: %.2f us a call (%d calls)\n", q/nq, nq); }
  write(c2p[1],"x",1); return 0;
}
