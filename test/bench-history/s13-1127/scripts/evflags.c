// dev: host cost of cuEventQuery on a completed event by event flags and context scheduling flags; cuStreamQuery beside it
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
typedef int CUresult; typedef int CUdevice; typedef void* CUcontext; typedef void* CUstream; typedef void* CUevent;
#define F(name, ...) static CUresult (*name)(__VA_ARGS__);
static void* lib;
F(cuInit, unsigned) F(cuDeviceGet,CUdevice*,int) F(cuDevicePrimaryCtxRetain,CUcontext*,CUdevice) F(cuCtxSetCurrent,CUcontext)
F(cuDevicePrimaryCtxSetFlags,CUdevice,unsigned)
F(cuStreamCreate,CUstream*,unsigned) F(cuEventCreate,CUevent*,unsigned) F(cuEventRecord,CUevent,CUstream) F(cuEventQuery,CUevent)
F(cuStreamSynchronize,CUstream) F(cuStreamQuery,CUstream) F(cuEventSynchronize,CUevent)
static void* need(const char* n){ void* p=dlsym(lib,n); if(!p){fprintf(stderr,"missing %s\n",n); exit(2);} return p; }
#define L(v,n) *(void**)&v = need(n)
#define CK(x) do{ CUresult r_=(x); if(r_){fprintf(stderr,"%s:%d %s = %d\n",__FILE__,__LINE__,#x,r_); exit(3);} }while(0)
static double now(){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e6+t.tv_nsec/1e3; }
#define N 200000
int main(int argc,char**argv){
  unsigned sched = argc>1 ? atoi(argv[1]) : 0;
  lib=dlopen("libcuda.so.1",RTLD_NOW); if(!lib){fprintf(stderr,"%s\n",dlerror()); return 2;}
  L(cuInit,"cuInit"); L(cuDeviceGet,"cuDeviceGet"); L(cuDevicePrimaryCtxRetain,"cuDevicePrimaryCtxRetain"); L(cuCtxSetCurrent,"cuCtxSetCurrent");
  L(cuDevicePrimaryCtxSetFlags,"cuDevicePrimaryCtxSetFlags_v2"); L(cuStreamCreate,"cuStreamCreate"); L(cuEventCreate,"cuEventCreate");
  L(cuEventRecord,"cuEventRecord"); L(cuEventQuery,"cuEventQuery"); L(cuStreamSynchronize,"cuStreamSynchronize"); L(cuStreamQuery,"cuStreamQuery");
  L(cuEventSynchronize,"cuEventSynchronize");
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev,0)); CK(cuDevicePrimaryCtxSetFlags(dev,sched)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c,dev)); CK(cuCtxSetCurrent(c));
  CUstream s; CK(cuStreamCreate(&s,1));
  unsigned flags[]={0,2,3,6};
  const char* names[]={"timing","disableTiming","blockingSync","interprocess"};
  printf("sched=%u", sched);
  for(int f=0;f<4;f++){
    CUevent e; CK(cuEventCreate(&e,flags[f]));
    CK(cuEventRecord(e,s)); CK(cuStreamSynchronize(s));
    double t0=now(); for(int i=0;i<N;i++) CK(cuEventQuery(e)); double q=(now()-t0)/N;
    t0=now(); int idle=0; for(int i=0;i<N;i++){ CK(cuEventRecord(e,(CUstream)0)); idle += cuEventQuery(e)==0; } double rq=(now()-t0)/N;
    CK(cuEventSynchronize(e));
    t0=now(); for(int i=0;i<N;i++) CK(cuEventSynchronize(e)); double sy=(now()-t0)/N;
    printf(" | %s query %.3f rec(legacy)+query %.3f idle %.2f sync %.3f", names[f], q, rq, (double)idle/N, sy);
  }
  double t0=now(); for(int i=0;i<N;i++) CK(cuStreamQuery(s)); double sq=(now()-t0)/N;
  t0=now(); for(int i=0;i<N;i++) cuStreamQuery((CUstream)0); double lq=(now()-t0)/N;
  printf(" | streamQuery own %.3f legacy %.3f\n", sq, lq);
  return 0;
}
