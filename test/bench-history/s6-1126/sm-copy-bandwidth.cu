#include <cstdio>
#include <cuda_runtime.h>
#define CK(x) do{cudaError_t e=(x); if(e){printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} }while(0)
template<int U>
__global__ void copyk(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
  size_t stride = (size_t)gridDim.x*blockDim.x;
  size_t i = (size_t)blockIdx.x*blockDim.x+threadIdx.x;
  for (; i + (U-1)*stride < n; i += U*stride) {
    uint4 v[U];
#pragma unroll
    for (int j=0;j<U;j++) v[j]=src[i+j*stride];
#pragma unroll
    for (int j=0;j<U;j++) dst[i+j*stride]=v[j];
  }
  for (; i < n; i += stride) dst[i]=src[i];
}
int main(int argc, char**argv){
  size_t bytes = (size_t)1<<30; size_t n = bytes/16;
  uint4 *a[2], *b[2]; cudaStream_t s[2]; cudaEvent_t e0[2], e1[2];
  for(int d=0;d<2;d++){ CK(cudaSetDevice(d)); CK(cudaDeviceEnablePeerAccess(1-d,0)); CK(cudaMalloc(&a[d],bytes)); CK(cudaMalloc(&b[d],bytes)); CK(cudaMemset(a[d],1,bytes)); CK(cudaStreamCreate(&s[d])); cudaEventCreate(&e0[d]); cudaEventCreate(&e1[d]); }
  int grids[] = {132, 264, 528, 1056};
  int blocks[] = {256, 512, 1024};
  for (int mode=0; mode<3; mode++) for (int both=1; both>=0; both--) for(int gi=0; gi<4; gi++) for (int bi=0; bi<3; bi++) for (int U=1; U<=4; U*=4) {
    float best[2]={0,0}; float ms[2][5];
    for (int rep=0; rep<5; rep++) {
      for(int d=0; d<(both?2:1); d++){ CK(cudaSetDevice(d));
        uint4* dst; const uint4* src;
        if (mode==0){ dst=b[d]; src=a[1-d]; }      // pull: read remote, write local
        else if (mode==1){ dst=b[1-d]; src=a[d]; } // push: read local, write remote
        else { dst=b[d]; src=a[d]; }               // local copy
        cudaEventRecord(e0[d], s[d]);
        if (U==1) copyk<1><<<grids[gi], blocks[bi], 0, s[d]>>>(dst, src, n); else copyk<4><<<grids[gi], blocks[bi], 0, s[d]>>>(dst, src, n);
        cudaEventRecord(e1[d], s[d]);
      }
      for(int d=0; d<(both?2:1); d++){ CK(cudaSetDevice(d)); CK(cudaEventSynchronize(e1[d])); cudaEventElapsedTime(&ms[d][rep], e0[d], e1[d]); }
    }
    // median
    for(int d=0; d<(both?2:1); d++){ float v[5]; for(int k=0;k<5;k++) v[k]=ms[d][k]; for(int x=0;x<5;x++)for(int y=x+1;y<5;y++) if(v[y]<v[x]){float t=v[x];v[x]=v[y];v[y]=t;} best[d]=v[2]; }
    float m = both ? (best[0]>best[1]?best[0]:best[1]) : best[0];
    printf("%s %s grid %4d block %4d U %d: %.1f GB/s\n", mode==0?"pull":mode==1?"push":"local", both?"both":"one ", grids[gi], blocks[bi], U, bytes/(m*1e-3)/1e9);
  }
  return 0;
}
