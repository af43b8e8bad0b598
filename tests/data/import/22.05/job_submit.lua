-- kestrel's job submission rules (22.05).
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.account == nil then
        slurm.log_user("kestrel: please give --account (sacctmgr show assoc user=$USER)")
        return slurm.ERROR
    end
    if job_desc.partition == "short" then job_desc.partition = "compute" end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
